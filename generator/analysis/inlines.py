"""Inline-function probes: every inlined copy of a function, with kinst's entry and return sites.

kinst's own inline tracing (libdtrace rewriting ``kinst::NAME:entry`` and
``:return`` into ``kinst::CALLER:OFFSET`` probes, review D38825) takes, for
each ``DW_TAG_inlined_subroutine`` of the function, the first instruction of
its first range (as the DWARF lists the ranges) as the entry, and the last
instruction of each range as a return: a copy split into several ranges
(an early ``return``, a block moved out of line) leaves through each.  The
caller is the function symbol whose code holds the instruction.  This module
computes the same sites ahead of time, from the line and inline index, and
gives each the verdict ``probes`` gives that instruction.

An out-of-line definition (a concrete subprogram of that name, including the
out-of-line instance of an inline function and gcc's clones of it) is
reported too, with no caller: ``fbt`` covers it, as kinst's rewriting falls
back to ``fbt`` for it.
"""

from __future__ import annotations

import difflib
from typing import Dict, List, NamedTuple, Optional, Tuple

from .dwarfindex import NAME_DECLARED, DwarfIndex
from .lines import Verdicts
from .records import STATUS_SKIP
from ..common.errors import UserError
from ..image.elf import KernelImage

ENTRY = "entry"
RETURN = "return"


class InlineSite(NamedTuple):
    """One probe of an inlined copy: its entry, or a return."""

    role: str  # ENTRY or RETURN
    function: Optional[str]  # the symbol the probe is named by
    offset: Optional[int]
    address: int
    status: str
    reason: str
    kind: str  # how a hit resumes ("skip" when refused)


class InlineCopy(NamedTuple):
    """One inlined copy of a function, or (``caller`` None) an out-of-line definition."""

    name: str  # the inline function
    caller: Optional[str]  # the symbol holding the entry; None for an out-of-line definition
    symbol: Optional[str]  # out-of-line: the symbol of the definition (fbt's function)
    entry_offset: Optional[int]  # from the caller (out of line: from the symbol)
    return_offsets: Tuple[int, ...]  # returns inside the caller
    call_file: Optional[str]
    call_line: Optional[int]
    ranges: Tuple[Tuple[int, int], ...]  # as the DWARF lists them
    sites: Tuple[InlineSite, ...]  # every entry and return, with its verdict (a return may lie in another symbol)


def _site(verdicts: Verdicts, role: str, address: int) -> InlineSite:
    func, probe, why = verdicts.probe(address)
    if probe is None:
        return InlineSite(role, func.name if func else None, address - func.address if func else None, address,
                          STATUS_SKIP, why, STATUS_SKIP)
    return InlineSite(role, func.name, probe.offset, address, probe.status, probe.reason, probe.kind)


def _last_instruction(img: KernelImage, verdicts: Verdicts, low: int, high: int) -> Optional[int]:
    """The address of the last instruction that starts in ``[low, high)``."""
    func = img.function_at(low)
    if func is None:
        return None
    probes = verdicts.probes_in(func, low, high)
    return probes[-1].address if probes else None


def _copy(img: KernelImage, index: DwarfIndex, verdicts: Verdicts, name: str, inl: int) -> InlineCopy:
    ranges = index.ranges_of_inline(inl)
    entry = _site(verdicts, ENTRY, ranges[0][0])
    sites = [entry]
    for low, high in ranges:
        if low == high:
            continue  # an empty range (gcc marks the entry point with one) holds no instruction to return from
        last = _last_instruction(img, verdicts, low, high)
        if last is None:
            func = img.function_at(low)
            why = "no function symbol holds this range" if func is None else "no instruction starts in this range"
            sites.append(InlineSite(RETURN, func.name if func else None, None, low, STATUS_SKIP, why, STATUS_SKIP))
        else:
            sites.append(_site(verdicts, RETURN, last))
    returns = tuple(s.offset for s in sites[1:] if s.function == entry.function and s.offset is not None)
    return InlineCopy(name, entry.function, None, entry.offset, returns, index.file_name(index.inl_call_file[inl]),
                      index.inl_call_line[inl], tuple(ranges), tuple(sites))


def _out_of_line(img: KernelImage, index: DwarfIndex, name: str, sub: int) -> Optional[InlineCopy]:
    ranges = index.ranges_of_sub(sub)
    func = img.function_at(ranges[0][0])
    if func is None:
        return None
    return InlineCopy(name, None, func.name, ranges[0][0] - func.address, (), None, None, tuple(ranges), ())


def inline_copies(img: KernelImage, index: DwarfIndex, name: str, rule: str = "any") -> List[InlineCopy]:
    """Every inlined copy of ``name`` and its out-of-line definitions, by entry address.

    A name that is never inlined is a one-line UserError that says whether it
    exists out of line.
    """
    verdicts = Verdicts(img, rule)
    copies = [_copy(img, index, verdicts, name, i) for i in index.inlines_named(name)]
    outs = [c for c in (_out_of_line(img, index, name, s) for s in index.subs_named(name)) if c is not None]
    if not copies:
        raise UserError(_never_inlined(img, index, name, outs))
    return sorted(copies + outs, key=lambda c: (c.ranges[0][0], c.caller is None))


def _never_inlined(img: KernelImage, index: DwarfIndex, name: str, outs: List[InlineCopy]) -> str:
    if outs:
        symbols = ", ".join(sorted({c.symbol for c in outs if c.symbol}))
        return (f"{img.path}: {name} is never inlined; it exists only out of line, as {symbols} "
                f"(fbt::{outs[0].symbol}:entry traces it)")
    nid = index.name_id(name)
    if nid is not None and index.name_flags[nid] & NAME_DECLARED:
        return f"{img.path}: {name} is never inlined and has no out-of-line code either (only declared in the DWARF)"
    near = difflib.get_close_matches(name, index.names, n=5)
    hint = f"; similar: {', '.join(near)}" if near else ""
    return f"{img.path}: no function {name} in the DWARF{hint}"


def copy_dict(c: InlineCopy) -> Dict[str, object]:
    """The JSON of one copy: the keys ``probes --inline --json`` documents, then the sites with their verdicts."""
    return {
        "caller": c.caller,
        "entry_offset": c.entry_offset,
        "return_offsets": list(c.return_offsets),
        "call_file": c.call_file,
        "call_line": c.call_line,
        "ranges": [list(r) for r in c.ranges],
        "function": c.name,
        "symbol": c.symbol,
        "provider": "fbt" if c.caller is None else "kinst",
        "sites": [
            {"role": s.role, "function": s.function, "offset": s.offset, "address": s.address,
             "status": s.status, "reason": s.reason}
            for s in c.sites
        ],
    }
