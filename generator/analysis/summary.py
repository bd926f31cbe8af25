"""Per-function summaries: ``probes --all --summary``.

A summary answers "how much of this image can kinst trace, and how" without
printing every instruction: the function verdict and its probes counted by
emulation kind.  ``from_report`` makes one from a ``FunctionReport``
(``probes.analyse``); ``fast_chunk`` makes them for a chunk of functions
from the counts of the ISA's host library (``isa/hostcore.py``: the portable
core's verdict on every instruction, counted in C), each run of functions in
a section read as one slice of the file.  A function the library hands back
(capstone cannot decode it, a %gs region, a walk past the symbol), that does
not fit its section, or of an ISA without a library, comes from
``from_report``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import report
from .exclusions import excluded, for_image
from .probes import analyse, code_runs
from .records import STATUS_OK, FunctionReport
from ..image.elf import Function, KernelImage
from ..isa import hostcore
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


def fast(img: KernelImage, func: Function, rule: str, isa: Isa, make: Optional[Make] = None) -> Any:
    """One function's summary, by the host library where it can."""
    return fast_chunk(img, [func], rule, isa, make)[0]


def fast_chunk(img: KernelImage, funcs: Sequence[Function], rule: str, isa: Isa,
               make: Optional[Make] = None) -> List[Any]:
    """The summaries of consecutive functions, the way ``probes --all --summary`` asks.

    The library counts each run of functions in one section in one call; what
    is left per function here is its name, the exclusion list and the
    prologue rule's bit.  A kernel has 50,000 functions, so that is kept to a
    few dictionary lookups.
    """
    make = make or record
    lib = hostcore.for_isa(isa)
    out: List[Optional[Any]] = [None] * len(funcs)
    if lib is not None:
        lay = lib.summary_layout()
        bit = 1 << isa.accelerator.prologue_rules.index(rule)
        prologue = isa.prologue_reasons[rule]
        md_excluded, isa_name = for_image(img), isa.name
        # A summary lists its kinds in name order.
        kinds_by_name = sorted((k.kind, lay.first_kind + i) for i, k in enumerate(isa.table_kinds))
        for run, span, first in code_runs(img, funcs):
            vals = lib.summarise(span, first, [funcs[k].address - first for k in run],
                                 [funcs[k].size for k in run]).tolist()
            cols = [vals[i :: lay.columns] for i in range(lay.columns)]
            for k, n, rules, counts in zip(run, cols[lay.n], cols[lay.prologue],
                                           zip(*(cols[i] for _, i in kinds_by_name))):
                if n == lay.deferred:
                    continue
                f = funcs[k]
                reason = excluded(f.name, isa_name, md_excluded) or ("" if rules & bit else prologue)
                kinds = {} if reason else {name: c for (name, _), c in zip(kinds_by_name, counts) if c}
                out[k] = make(f.qualified, f.address, f.size, reason, "", n, kinds)
    return [s if s is not None else from_report(analyse(img, f, rule, isa), make) for s, f in zip(out, funcs)]


def fast_json_chunk(img: KernelImage, funcs: Sequence[Function], rule: str, isa: Isa) -> List[str]:
    """``fast_chunk``'s JSON lines (``make=report.summary_json_fields``), with the library writing each line
    from ``"eligible"`` on out of its counts (``Host.summary_json``, a formatter: the verdicts are the counts').

    What is left per function is its name, the head of the line, and the
    exclusion list, whose rare verdict replaces the library's.  A function
    the library hands back comes from ``from_report``.
    """
    lib = hostcore.for_isa(isa)
    if lib is None:
        return fast_chunk(img, funcs, rule, isa, report.summary_json_fields)
    lay = lib.summary_layout()
    bit = 1 << isa.accelerator.prologue_rules.index(rule)
    prologue = report.quote(isa.prologue_reasons[rule])
    kinds = [report.quote(k.kind) for k in isa.table_kinds]
    md_excluded, isa_name, head = for_image(img), isa.name, report.summary_json_head
    out: List[Optional[str]] = [None] * len(funcs)
    for run, span, first in code_runs(img, funcs):
        counts = lib.summarise(span, first, [funcs[k].address - first for k in run], [funcs[k].size for k in run])
        tails = lib.summary_json(counts, bit, prologue, kinds)
        for k, n, tail in zip(run, counts[lay.n :: lay.columns], tails):
            if tail:
                f = funcs[k]
                reason = excluded(f.name, isa_name, md_excluded)
                out[k] = report.summary_json_fields(f.qualified, f.address, f.size, reason, "", n, {}) if reason \
                    else head(f.qualified, f.address, f.size) + tail
    return [line if line is not None else from_report(analyse(img, f, rule, isa), report.summary_json_fields)
            for f, line in zip(funcs, out)]
