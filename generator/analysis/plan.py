"""Stage 3b: the probe plan -- what goes into a generated kinst table.

Only probes the analysis proved safe go in: the function is eligible and the
instruction's status is ``ok``.  Everything else is listed in ``refused``
with its reason, so the generated sources can say what was left out and why.

Entries are keyed by (function, offset), not by absolute address: a module or
shared library loads at an address the table cannot know, so the glue resolves
each function's live address when a probe is created and the core works from
there.  Functions are sorted by link-time address and each function's entries
by offset, which keeps the core's lookup a pair of binary searches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, List, NamedTuple, Tuple

from generator.analysis.records import STATUS_OK, FunctionReport
from generator.image.elf import KernelImage


class TableFunc(NamedTuple):
    """A function with at least one probe in the table."""

    name: str  # symbol name, as the kernel linker knows it
    qualified: str  # name@file for a local symbol
    address: int  # st_value (link-time)
    size: int
    first: int  # index of its first entry
    count: int


class TableEntry(NamedTuple):
    """One probe: the ISA's per-probe metadata, ready for the C table."""

    func: int
    offset: int
    kind: str
    md: Any  # the ISA's probe metadata
    orig: bytes


class Refusal(NamedTuple):
    function: str
    offset: int  # -1: the whole function
    reason: str


@dataclass(frozen=True)
class ProbePlan:
    """Everything the kinst templates need, and nothing they must decide."""

    arch: str  # the ISA's name
    image: str
    e_type: str  # ET_EXEC (a kernel), ET_REL (a module) or ET_DYN
    build_id: str
    sha256: str
    funcs: Tuple[TableFunc, ...]
    entries: Tuple[TableEntry, ...]
    refused: Tuple[Refusal, ...]


def make_plan(img: KernelImage, reports: Iterable[FunctionReport]) -> ProbePlan:
    funcs: List[TableFunc] = []
    entries: List[TableEntry] = []
    refused: List[Refusal] = []
    for rep in sorted(reports, key=lambda r: (r.address, r.name)):
        if not rep.eligible:
            refused.append(Refusal(rep.qualified, -1, rep.reason))
            continue
        first = len(entries)
        for p in rep.probes:
            if p.status != STATUS_OK:
                refused.append(Refusal(rep.qualified, p.offset, p.reason))
                continue
            entries.append(TableEntry(len(funcs), p.offset, p.kind, p.md, p.bytes))
        if len(entries) > first:
            funcs.append(TableFunc(rep.name, rep.qualified, rep.address, rep.size, first, len(entries) - first))
    return ProbePlan(
        arch=img.isa.name,
        image=img.path,
        e_type=img.e_type,
        build_id=img.build_id or "",
        sha256=img.sha256(),
        funcs=tuple(funcs),
        entries=tuple(entries),
        refused=tuple(refused),
    )
