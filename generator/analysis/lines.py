"""Source-line probes: the kinst probe sites of ``FILE:LINE``, and a function's lines with their sites.

A probe mode maps its input to the ``Probe``s of ``analysis.probes.analyse``:
each site is an instruction, and its verdict (``status``, ``reason``) is
the one ``probes`` gives that instruction.

Which line an instruction is.  The line table may hold several rows at one
address; only the last owns the bytes, and that is the line every DWARF
consumer (``llvm-symbolizer``, ``addr2line``, a debugger's backtrace) gives
the address.  A line whose rows all share their address with a later row
has no instructions of its own (typically a call whose code is all the
inlined callee's, or a declaration); it still has a site where gdb's
``break FILE:LINE`` stops (``site_rows``: the first statement row of the
line in each of gdb's blocks, with gdb's line-table rules), marked as
owning no bytes.  A line with no site at all is the "no code" error, which
names the nearest lines that have code.  A site is ``is_stmt`` when the line
table marks a statement of its line at its address (gcc writes the
statement row, then a non-statement row of the same line at the same
address).

What a site is.  A line's code is usually several ranges (scattered by the
optimiser, duplicated by inlining and unrolling), and inside one range the
table often has several rows (a new column, ``is_stmt`` toggling).  A site is
where control enters the line's code: the first instruction of each run of
rows of ``FILE:LINE`` that does not continue the same line in the same
function and the same inlined copy.  That is one probe per place the line
begins, in every function and every inlined copy.  ``perf probe FILE:LINE``
keeps one per function and copy, on ``is_stmt`` rows only; here every entry
is kept and ``is_stmt`` is reported rather than filtered, so that a line the
compiler marked only as non-statement still has its sites.  Rows over the
alignment padding between functions (no symbol and no DWARF function holds
them) are nobody's code and make no site.  ``llvm-symbolizer
--inlining`` on a site's address names ``FILE:LINE`` and the same inlined
functions -- which the tests hold it to, on every site of the test images.
"""

from __future__ import annotations

import difflib
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from .dwarfindex import FLAG_END, FLAG_STMT, DwarfIndex
from .probes import analyse
from .records import STATUS_SKIP, FunctionReport, Probe
from ..common.errors import UserError
from ..image.elf import Function, KernelImage


class LineSite(NamedTuple):
    """One probe site of a source line."""

    function: Optional[str]  # the symbol the probe is named by (None: no symbol holds the address)
    offset: Optional[int]  # from that symbol
    address: int
    file: str
    line: int
    is_stmt: bool
    inlined: Tuple[str, ...]  # the inlined functions at the address, innermost first
    status: str  # the probe verdict, as ``probes`` gives it
    reason: str
    kind: str  # how a hit resumes (the probe's kind; "skip" when refused)
    view: int = 0  # the line's first row at the address among the rows there (DWARF 5 location views)
    owns: bool = True  # the instruction is the line's; False: its row has no bytes, the next row's line's code


class Verdicts:
    """The probe verdicts of the functions a query touches, each function analysed once."""

    def __init__(self, img: KernelImage, rule: str) -> None:
        self.img = img
        self.rule = rule
        self._reports: Dict[int, Tuple[FunctionReport, Dict[int, Probe]]] = {}

    def report(self, func: Function) -> Tuple[FunctionReport, Dict[int, Probe]]:
        got = self._reports.get(func.address)
        if got is None:
            rep = analyse(self.img, func, self.rule)
            got = self._reports[func.address] = (rep, {p.address: p for p in rep.probes})
        return got

    def probe(self, address: int) -> Tuple[Optional[Function], Optional[Probe], str]:
        """The function holding ``address``, its probe there, and why there is none."""
        func = self.img.function_at(address)
        if func is None:
            return None, None, "no function symbol holds this address, so kinst cannot name a probe here"
        _, probes = self.report(func)
        p = probes.get(address)
        if p is None:
            return func, None, f"not on an instruction boundary of {func.qualified} (the line table points inside one)"
        return func, p, ""

    def probes_in(self, func: Function, low: int, high: int) -> List[Probe]:
        """The probes of ``func`` whose instruction starts in ``[low, high)``."""
        _, probes = self.report(func)
        return [probes[a] for a in sorted(probes) if low <= a < high]


def parse_spec(spec: str) -> Tuple[str, int]:
    """``FILE:LINE`` -> (FILE, LINE); a one-line UserError otherwise."""
    file, sep, line = spec.rpartition(":")
    if not sep or not file or not line.isdigit() or int(line) < 1:
        raise UserError(f"{spec!r}: expected FILE:LINE, a source file (or the end of its path) and a line number")
    return file, int(line)


def _chain(index: DwarfIndex, address: int) -> Tuple[str, ...]:
    return tuple(index.names[index.inl_name[i]] for i in index.inline_chain(address))


def _chain_ids(index: DwarfIndex, address: int) -> Tuple[int, ...]:
    return tuple(index.inline_chain(address))


def _prev_owner(index: DwarfIndex, row: int) -> int:
    """The row owning the bytes just before ``row``'s address in its sequence; -1 at a sequence's start."""
    prev = row - 1
    addr = index.row_addr[row]
    while prev >= 0 and not index.row_flags[prev] & FLAG_END and index.row_addr[prev] == addr:
        prev -= 1
    if prev < 0 or index.row_flags[prev] & FLAG_END:
        return -1
    return prev


def _starts_run(img: KernelImage, index: DwarfIndex, row: int) -> bool:
    """True when ``row`` owns bytes and begins a run of its line (see the module docstring)."""
    if not index.owns(row):
        return False
    prev = _prev_owner(index, row)
    if prev < 0:
        return True
    if (index.row_file[prev], index.row_line[prev]) != (index.row_file[row], index.row_line[row]):
        return True
    here = index.row_addr[row]
    before = here - 1
    f_here, f_before = img.function_at(here), img.function_at(before)
    if (f_here.address if f_here else None) != (f_before.address if f_before else None):
        return True
    return _chain_ids(index, here) != _chain_ids(index, before)


def site_rows(img: KernelImage, index: DwarfIndex, rows: Sequence[int]) -> List[int]:
    """Of ``rows`` (of one line, by address), those that make its sites, by address: where a run of the
    line's own bytes begins, and where gdb's ``break FILE:LINE`` stops -- the first statement row of the line
    in each of gdb's blocks (function, inlined copy, lexical block that declares a name), a row with no bytes
    of its own included (see the module docstring).  Rows outside every function make none."""
    out = []
    blocks = set()
    for r in rows:
        address = index.row_addr[r]
        if not _is_code(img, index, address):
            continue
        gdb = False
        if index.row_flags[r] & FLAG_STMT and _gdb_keeps(index, r):
            block = index.block_at(address)
            if block is None or block not in blocks:
                gdb = True
                if block is not None:
                    blocks.add(block)
        if gdb or _starts_run(img, index, r):
            out.append(r)
    # One site per address: of several rows of the line there, the first (its view) stands for them.
    seen = set()
    kept = []
    for r in out:
        first = _first_view(index, r)
        if index.row_addr[r] not in seen:
            seen.add(index.row_addr[r])
            kept.append(first)
    return kept


def _gdb_keeps(index: DwarfIndex, row: int) -> bool:
    """Whether gdb's line table keeps ``row``: gdb ends a file's entries where the table switches to another
    file, and the end drops that file's entries at the same address -- unless the row switching is not a
    statement at that same address, which gdb ignores (gdb/dwarf2/read.c, lnp_state_machine::record_line).  A
    row of a call line followed, at its address, by the first row of an inlined callee from a header is
    therefore not one of gdb's; its next statement row in the block is."""
    current = index.row_file[row]
    for r in index.rows_at(row):
        if r <= row:
            continue
        if index.row_file[r] == current:
            continue
        if index.row_flags[r] & FLAG_STMT and index.row_line[r]:
            return False
    return index.row_line[row] != 0


def _first_view(index: DwarfIndex, row: int) -> int:
    """The first row of ``row``'s file and line at its address."""
    key = (index.row_file[row], index.row_line[row])
    for r in index.rows_at(row):
        if (index.row_file[r], index.row_line[r]) == key:
            return r
    return row


def _is_code(img: KernelImage, index: DwarfIndex, address: int) -> bool:
    """True when ``address`` is in a function, by its symbol or its DWARF; the line table also covers the
    alignment padding between functions, which is nobody's code."""
    return img.function_at(address) is not None or index.sub_at(address) is not None


def make_site(index: DwarfIndex, verdicts: Verdicts, address: int, row: int) -> LineSite:
    """The site of ``row``'s line at ``address``: its statement flag is any of the line's rows there."""
    func, probe, why = verdicts.probe(address)
    file = index.files[index.row_file[row]]
    line = index.row_line[row]
    key = (index.row_file[row], index.row_line[row])
    views = index.rows_at(row)
    same = [r for r in views if (index.row_file[r], index.row_line[r]) == key]
    stmt = any(index.row_flags[r] & FLAG_STMT for r in same)
    view = index.row_view[row] if address == index.row_addr[row] else 0
    owns = address != index.row_addr[row] or any(index.owns(r) for r in same)
    chain = _chain(index, address)
    if probe is None:
        return LineSite(func.name if func else None, address - func.address if func else None, address, file, line,
                        stmt, chain, STATUS_SKIP, why, STATUS_SKIP, view, owns)
    return LineSite(func.name, probe.offset, address, file, line, stmt, chain, probe.status, probe.reason, probe.kind,
                    view, owns)


def _similar_files(index: DwarfIndex, file: str) -> List[str]:
    base = os.path.basename(file)
    paths = [p for i, p in enumerate(index.files) if index.has_code(i)]
    near = [p for p in paths if base and base in os.path.basename(p)]
    near += difflib.get_close_matches(base, [os.path.basename(p) for p in paths], n=3)
    return sorted(set(near))[:5]


def resolve_file(index: DwarfIndex, file: str, image: str) -> int:
    """The one file of the line table that ``file`` names by path suffix."""
    matches = index.files_matching(file)
    if not matches:
        near = _similar_files(index, file)
        hint = f"; similar: {', '.join(near)}" if near else ""
        raise UserError(f"{image}: no source file '{file}' has code in the line table{hint}")
    if len(matches) > 1:
        names = ", ".join(index.files[i] for i in matches[:5])
        raise UserError(f"{image}: '{file}' names {len(matches)} source files ({names}); give more of the path")
    return matches[0]


def line_sites(img: KernelImage, index: DwarfIndex, spec: str, rule: str = "any",
               verdicts: Optional[Verdicts] = None) -> List[LineSite]:
    """Every probe site of ``FILE:LINE``, by address; a one-line UserError for a line without code.
    ``verdicts`` lets many queries share the analysed functions."""
    file, line = parse_spec(spec)
    fid = resolve_file(index, file, img.path)
    rows = site_rows(img, index, index.rows_of_line(fid, line))
    if not rows:
        lines = index.lines_of_file(fid)

        def has_code(n: int) -> bool:
            return bool(site_rows(img, index, index.rows_of_line(fid, n)))

        before = next((n for n in reversed(lines) if n < line and has_code(n)), None)
        after = next((n for n in lines if n > line and has_code(n)), None)
        near = " and ".join(str(n) for n in (before, after) if n is not None) or "none"
        raise UserError(f"{index.files[fid]}:{line} has no code in {img.path}; nearest lines with code: {near}")
    verdicts = verdicts or Verdicts(img, rule)
    return [make_site(index, verdicts, index.row_addr[r], r) for r in rows]


def site_at(img: KernelImage, index: DwarfIndex, func: Function, offset: int, rule: str = "any") -> LineSite:
    """The site of ``func``'s instruction at ``offset`` (``--function F --offset N --vars``): its line is the
    row covering it; an offset that is no instruction boundary is the one-line error ``probes`` gives."""
    from .probes import find_offset

    verdicts = Verdicts(img, rule)
    rep, _ = verdicts.report(func)
    probe = find_offset(rep, offset)
    row = index.row_at(probe.address)
    if row is None or not index.row_line[row]:
        func_, p, why = verdicts.probe(probe.address)
        return LineSite(func.name, probe.offset, probe.address, "", 0, False, _chain(index, probe.address),
                        probe.status, probe.reason, probe.kind)
    return make_site(index, verdicts, probe.address, _first_view(index, row))


def function_sites(img: KernelImage, index: DwarfIndex, func: Function, rule: str = "any") -> List[LineSite]:
    """The sites of every line in ``func``, by address: its source listing's probe offsets."""
    verdicts = Verdicts(img, rule)
    low, high = func.address, func.address + func.size
    by_line: Dict[Tuple[int, int], List[int]] = {}
    first = None
    for r in index.rows_between(low, high):
        if first is None:
            first = r
        if index.row_line[r] == 0:
            continue
        by_line.setdefault((index.row_file[r], index.row_line[r]), []).append(r)
    starts: Dict[int, int] = {}  # address -> row
    for rows in by_line.values():
        for r in site_rows(img, index, rows):
            starts.setdefault(max(index.row_addr[r], low), r)
    if first is not None and low not in starts:
        owner = index.row_at(low)  # the function's first byte is a site of the line it begins
        if owner is not None and index.row_line[owner]:
            starts[low] = _first_view(index, owner)
    out = [make_site(index, verdicts, a, starts[a]) for a in sorted(starts)]
    if not out:
        raise UserError(f"{img.path}: {func.qualified} has no line-table rows; was it built with -g?")
    return out


def primary_file(index: DwarfIndex, func: Function, sites: List[LineSite]) -> Tuple[str, int]:
    """The source file ``func`` is defined in and its declaration line: DW_AT_decl_file and DW_AT_decl_line,
    else the file most of its own (not inlined) sites are in."""
    sub = index.sub_at(func.address)
    if sub is not None:
        name = index.file_name(index.sub_file[sub])
        if name:
            return name, index.sub_line[sub]
    counts: Dict[str, int] = {}
    for s in sites:
        if not s.inlined:
            counts[s.file] = counts.get(s.file, 0) + 1
    return (max(sorted(counts), key=lambda f: counts[f]) if counts else sites[0].file), 0


def site_dict(s: LineSite) -> Dict[str, object]:
    """The JSON of one site: the keys ``probes --line --json`` documents."""
    return {
        "function": s.function,
        "offset": s.offset,
        "address": s.address,
        "file": s.file,
        "line": s.line,
        "is_stmt": s.is_stmt,
        "inlined": list(s.inlined),
        "status": s.status,
        "reason": s.reason,
        "view": s.view,
        "owns": s.owns,
    }
