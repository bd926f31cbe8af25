"""The host walk's summaries against the per-function report: what test_host_walk and test_dbp_host_walk share."""

from __future__ import annotations

from typing import List, Sequence

from generator.analysis import report, summary
from generator.analysis.probes import analyse


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
