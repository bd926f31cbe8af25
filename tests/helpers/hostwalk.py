"""The host walk's summaries against the per-function report: what test_host_walk and test_dbp_host_walk share."""

from __future__ import annotations

from typing import Callable, List, Sequence

from generator.analysis import report, summary
from generator.analysis.probes import analyse, code_runs
from generator.common.errors import ClassifierError
from generator.isa import hostcore


def summary_mismatches(img, funcs: Sequence, rule: str) -> List[tuple]:
    """Functions whose summary (record, and ``--json`` line, which the library formats itself) differs between
    the walk (``summary.fast_chunk``) and the report (``probes.analyse``): (name, the walk's, the report's)."""
    fast = summary.fast_chunk(img, funcs, rule, img.isa)
    lines = summary.fast_json_chunk(img, funcs, rule, img.isa)
    bad = []
    for f, got, line in zip(funcs, fast, lines):
        rep = analyse(img, f, rule, img.isa)
        if got != summary.from_report(rep):
            bad.append((f.name, got, summary.from_report(rep)))
        elif line != summary.from_report(rep, report.summary_json_fields):
            bad.append((f.name, line, summary.from_report(rep, report.summary_json_fields)))
    return bad


def mutated_walk(img, funcs: Sequence, bodies: Sequence[bytes], check: Callable[[object, object], None]) -> int:
    """Summarise ``funcs`` (laid out from ``bodies``) with the host walk and analyse each with the report:
    where the report stops (capstone and the core disagree) the walk must have handed the function back;
    elsewhere ``check(function, report)`` asserts what must agree.  How many functions the walk did itself."""
    lib = hostcore.for_isa(img.isa)
    lay = lib.summary_layout()
    walked = 0
    for run, span, first in code_runs(img, funcs):
        counts = lib.summarise(span, first, [funcs[k].address - first for k in run], [funcs[k].size for k in run])
        for k, n in zip(run, counts[lay.n :: lay.columns]):
            f = funcs[k]
            try:
                rep = analyse(img, f, "any", img.isa)
            except ClassifierError:
                assert n == lay.deferred, bodies[k].hex()
                continue
            walked += n != lay.deferred
            assert summary.fast(img, f, "any", img.isa) == summary.from_report(rep), bodies[k].hex()
            check(f, rep)
    return walked
