"""Per-function summaries: ``probes --all --summary``.

A summary answers "how much of this image can kinst trace, and how" without
printing every instruction: the function verdict and its probes counted by
emulation kind.  Two paths compute it and must agree:

- ``from_report``: from the full capstone analysis (``probes.analyse``);
- ``fast``: from the ISA's accelerator (``Isa.accelerator``) when it has one,
  falling back to ``from_report`` for any function it declines.

``tests/toolchain/test_accelerator.py`` holds the two equal on real images.
``fast_chunk`` and ``fast_json_chunk`` are ``fast`` over a chunk of
functions, as a whole image asks for them (the second writes the JSON lines,
with the accelerator writing their ends); ``test_native_walk.py`` holds them
equal to ``fast`` one function at a time.
"""

from __future__ import annotations

import importlib
from collections import Counter
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import report
from .exclusions import excluded, for_image
from .probes import MAX_INSN, analyse, code_runs, function_code
from .records import STATUS_OK, FunctionReport
from ..image.elf import Function, KernelImage
from ..isa.contract import Isa


# What a summary is made into: ``record`` (a dict, for JSON and text alike) or, for
# ``--json``, ``report.summary_json_fields`` (its JSON line, with no dict between).
Make = Callable[[str, int, int, str, str, int, Dict[str, int]], Any]


def from_report(rep: FunctionReport, make: Optional[Make] = None) -> Any:
    kinds = Counter(p.kind for p in rep.probes if p.status == STATUS_OK)
    return (make or record)(rep.qualified, rep.address, rep.size, rep.reason, rep.walk_error, len(rep.probes),
                            {k: kinds[k] for k in sorted(kinds) if kinds[k]})


def record(name: str, address: int, size: int, reason: str, walk_error: str, n: int,
           kinds: Dict[str, int]) -> Dict[str, Any]:
    """One function's summary: ``kinds`` counts its probes by kind, in name order."""
    ok = sum(kinds.values())
    return {
        "function": name,
        "address": address,
        "size": size,
        "eligible": not reason,
        "reason": reason,
        "walk_error": walk_error,
        "instructions": n,
        "probes": ok,
        "skipped": n - ok,
        "kinds": kinds,
    }


def accelerator(isa: Isa) -> Optional[ModuleType]:
    """The ISA's accelerator module, or None when it has none."""
    return importlib.import_module(isa.accelerator) if isa.accelerator else None


def fast(img: KernelImage, func: Function, rule: str, isa: Isa, accel: Optional[ModuleType],
         make: Optional[Make] = None) -> Any:
    """The summary via the accelerator; the capstone path if it declines."""
    sec = img.section_at(func.address)
    if accel is None or sec is None:
        return from_report(analyse(img, func, rule, isa), make)
    code = function_code(img, func, sec)
    s = accel.summarise(code, func.address, func.size)
    if s is None:
        return from_report(analyse(img, func, rule, isa), make)
    reason = excluded(func.name, isa.name, for_image(img))
    if not reason and rule not in s.frame_rules:
        reason = isa.prologue_reasons[rule]
    kinds = {} if reason else s.kinds
    return (make or record)(func.qualified, func.address, func.size, reason, s.walk_error, s.instructions, kinds)


def fast_chunk(img: KernelImage, funcs: Sequence[Function], rule: str, isa: Isa,
               accel: ModuleType, make: Optional[Make] = None) -> List[Any]:
    """``fast`` over consecutive functions, the way ``probes --all --summary`` asks.

    The same records, with the work that does not change from one function to
    the next done once: the section is looked up only when a function leaves
    the last one, and the bytes are read from it directly.  A kernel has
    50,000 functions, and these per-function steps cost as much as decoding
    them.  An accelerator with ``summarise_span`` gets each run of functions
    in one section as one buffer, one with ``summarise_many`` the chunk's
    functions in one call.  Anything unusual (no section, a function past its
    end, bytes the accelerator declines) goes through ``fast`` itself, which
    says what is wrong or asks capstone.
    """
    make = make or record
    md_excluded, isa_name = for_image(img), isa.name
    prologue = isa.prologue_reasons[rule]
    out: List[Any] = []
    for f, s in zip(funcs, _accelerated(img, funcs, accel)):
        if s is None:
            out.append(fast(img, f, rule, isa, accel, make))
            continue
        reason = excluded(f.name, isa_name, md_excluded)
        if not reason and rule not in s.frame_rules:
            reason = prologue
        # The accelerator's kinds are already in name order.
        out.append(make(f.qualified, f.address, f.size, reason, s.walk_error, s.instructions,
                        {} if reason else s.kinds))
    return out


def fast_json_chunk(img: KernelImage, funcs: Sequence[Function], rule: str, isa: Isa,
                    accel: ModuleType) -> List[str]:
    """``fast_chunk``'s JSON lines (``make=report.summary_json_fields``), with the accelerator writing each
    line's end where it offers to (``summary_json_span``).

    What is left per function is its name: the head of the line, and the
    exclusion list, whose rare verdict replaces the accelerator's.  A function
    the accelerator declines goes through ``fast``.
    """
    span_json = getattr(accel, "summary_json_span", None)
    if span_json is None:
        return fast_chunk(img, funcs, rule, isa, accel, report.summary_json_fields)
    md_excluded, isa_name = for_image(img), isa.name
    prologue = report.quote(isa.prologue_reasons[rule])
    head = report.summary_json_head
    out: List[Optional[str]] = [None] * len(funcs)
    for run, span, first in code_runs(img, funcs):
        got = span_json(span, [funcs[k].address - first for k in run], [funcs[k].size for k in run],
                        rule == "first", prologue)
        if got is None:
            break
        for k, n, tail in zip(run, *got):
            if tail:
                f = funcs[k]
                reason = excluded(f.name, isa_name, md_excluded)
                out[k] = report.summary_json_fields(f.qualified, f.address, f.size, reason, "", n, {}) if reason \
                    else head(f.qualified, f.address, f.size) + tail
    return [line if line is not None else fast(img, f, rule, isa, accel, report.summary_json_fields)
            for f, line in zip(funcs, out)]


def _accelerated(img: KernelImage, funcs: Sequence[Function], accel: ModuleType) -> List[Optional[Any]]:
    """The accelerator's summary of each function, None for one it declines or that does not fit its section.

    It reads each run of functions from one slice of the file
    (``summarise_span``) or, lacking that, gets each function's own bytes
    (``summarise_many``, ``summarise``).
    """
    span_fn = getattr(accel, "summarise_span", None)
    many = getattr(accel, "summarise_many", None)
    out: List[Optional[Any]] = [None] * len(funcs)
    for run, span, first in code_runs(img, funcs):
        if span_fn is not None:
            got = span_fn(span, first, [funcs[k].address - first for k in run], [funcs[k].size for k in run],
                          MAX_INSN)
        else:
            items = []
            for k in run:
                start = funcs[k].address - first
                items.append((span[start : start + funcs[k].size + MAX_INSN], funcs[k].address, funcs[k].size))
            got = many(items) if many else [accel.summarise(*it) for it in items]
        for k, s in zip(run, got):
            out[k] = s
    return out
