"""Per-function summaries: ``probes --all --summary``.

A summary answers "how much of this image can kinst trace, and how" without
printing every instruction: the function verdict and its probes counted by
emulation kind.  Two paths compute it and must agree:

- ``from_report``: from the full capstone analysis (``probes.analyse``);
- ``fast``: from the ISA's accelerator (``Isa.accelerator``) when it has one,
  falling back to ``from_report`` for any function it declines.

``tests/toolchain/test_accelerator.py`` holds the two equal on real images.
"""

from __future__ import annotations

import importlib
from collections import Counter
from types import ModuleType
from typing import Any, Dict, List, Optional, Sequence

from generator.analysis.exclusions import excluded
from generator.analysis.probes import MAX_INSN, analyse, function_code
from generator.analysis.records import STATUS_OK, FunctionReport
from generator.image.elf import Function, KernelImage, Section
from generator.isa.contract import Isa


def from_report(rep: FunctionReport) -> Dict[str, Any]:
    kinds = Counter(p.kind for p in rep.probes if p.status == STATUS_OK)
    return _record(rep.qualified, rep.address, rep.size, rep.reason, rep.walk_error, len(rep.probes), kinds)


def _record(name, address, size, reason, walk_error, n, kinds) -> Dict[str, Any]:
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
        "kinds": {k: kinds[k] for k in sorted(kinds) if kinds[k]},
    }


def accelerator(isa: Isa) -> Optional[ModuleType]:
    """The ISA's accelerator module, or None when it has none."""
    return importlib.import_module(isa.accelerator) if isa.accelerator else None


def fast(img: KernelImage, func: Function, rule: str, isa: Isa, accel: Optional[ModuleType]) -> Dict[str, Any]:
    """The summary via the accelerator; the capstone path if it declines."""
    sec = img.section_at(func.address)
    if accel is None or sec is None:
        return from_report(analyse(img, func, rule, isa))
    code = function_code(img, func, sec)
    s = accel.summarise(code, func.address, func.size)
    if s is None:
        return from_report(analyse(img, func, rule, isa))
    reason = excluded(func.name, isa.name, isa.md_excluded)
    if not reason and rule not in s.frame_rules:
        reason = isa.prologue_reasons[rule]
    kinds = {} if reason else s.kinds
    return _record(func.qualified, func.address, func.size, reason, s.walk_error, s.instructions, kinds)


def fast_chunk(img: KernelImage, funcs: Sequence[Function], rule: str, isa: Isa,
               accel: ModuleType) -> List[Dict[str, Any]]:
    """``fast`` over consecutive functions, the way ``probes --all --summary`` asks.

    The same records, with the work that does not change from one function to
    the next done once: the section is looked up only when a function leaves
    the last one, and the bytes are read from it directly.  A kernel has
    50,000 functions, and these per-function steps cost as much as decoding
    them.  An accelerator with ``summarise_many`` gets the whole chunk in one
    call.  Anything unusual (no section, a function past its end, bytes the
    accelerator declines) goes through ``fast`` itself, which says what is
    wrong or asks capstone.
    """
    md_excluded = isa.md_excluded
    prologue = isa.prologue_reasons[rule]
    sec: Optional[Section] = None
    lo = hi = 0
    items, inline = [], []
    for f in funcs:
        a, size = f.address, f.size
        if not lo <= a < hi:
            sec = img.section_at(a)
            lo, hi = (sec.addr, sec.addr + sec.size) if sec is not None else (0, 0)
        fits = sec is not None and not sec.nobits and a + size <= hi
        inline.append(fits)
        if fits:
            items.append((img.read_in(sec, a, min(size + MAX_INSN, hi - a)), a, size))
    many = getattr(accel, "summarise_many", None)
    sums = iter(many(items) if many else [accel.summarise(*it) for it in items])
    out: List[Dict[str, Any]] = []
    for f, fits in zip(funcs, inline):
        s = next(sums) if fits else None
        if s is None:
            out.append(fast(img, f, rule, isa, accel))
            continue
        reason = excluded(f.name, isa.name, md_excluded)
        if not reason and rule not in s.frame_rules:
            reason = prologue
        n = s.instructions
        kinds = {} if reason else s.kinds
        ok = sum(kinds.values())
        out.append({
            "function": f.qualified,
            "address": f.address,
            "size": f.size,
            "eligible": not reason,
            "reason": reason,
            "walk_error": s.walk_error,
            "instructions": n,
            "probes": ok,
            "skipped": n - ok,
            "kinds": kinds,  # the accelerator's, already in name order
        })
    return out
