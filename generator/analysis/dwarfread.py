"""Read one compilation unit's part of the line and inline index, and join parts into a ``DwarfIndex``.

A unit gives two parts, each read and cached on its own (``indexcache``):

- its **lines**: every row of its line program, ``is_stmt`` kept, rows
  that share an address kept too (a call whose code is all the inlined
  callee's has a row there, and gdb breaks on it);
- its **DIEs** that can hold code: subprograms, inlined subroutines and
  the lexical blocks that declare something (gdb's blocks), descending only
  where those can occur and skipping every other subtree through
  ``DW_AT_sibling``.

A ``FILE:LINE`` query reads the lines of the units whose file table names
FILE, then the DIEs of those that have rows of the line; an address query
the parts of the unit covering it.

DWARF 4 and 5 differ in three places handled here: file numbers (from 1 in
4, from 0 in 5, for rows, ``DW_AT_decl_file`` and ``DW_AT_call_file``
alike), directory 0 (the compilation directory in 5), and range lists
(``.debug_ranges`` against ``.debug_rnglists``).  Names are resolved
through ``DW_AT_abstract_origin`` and ``DW_AT_specification`` chains, into
other units when a reference points there; an inlined copy or an
out-of-line instance is named by the DIE its chain ends at.
"""

from __future__ import annotations

import posixpath
from array import array
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .dwarfdir import NO_LINES, Directory
from .dwarfindex import (
    ARRAYS, FLAG_END, FLAG_STMT, NAME_DECLARED, NAME_INLINE, NO_FILE, DwarfIndex,
)
from ..image.dwarf import spec as S
from ..image.dwarf.lineprog import ROW_END, ROW_STMT, header, join_path, rows as program_rows
from ..image.dwarf.lists import ranges as range_list
from ..image.dwarf.sections import DwarfError, Reads, Sections
from ..image.dwarf.units import MAX_DEPTH, Unit, UnitReader

# DIEs whose children may include subprograms or inlined copies.
_DESCEND = frozenset((S.DW_TAG_lexical_block, S.DW_TAG_namespace, S.DW_TAG_module, S.DW_TAG_class_type,
                      S.DW_TAG_structure_type, S.DW_TAG_union_type))
# Children that make a lexical block one of gdb's blocks: they declare a name in it.
_SYMBOLS = frozenset((S.DW_TAG_variable, S.DW_TAG_formal_parameter, S.DW_TAG_label, S.DW_TAG_typedef,
                      S.DW_TAG_structure_type, S.DW_TAG_union_type, S.DW_TAG_enumeration_type,
                      S.DW_TAG_subprogram, S.DW_TAG_base_type))
_NAMED = (S.DW_AT_name, S.DW_AT_abstract_origin, S.DW_AT_specification)
MAX_CHAIN = 16  # origin/specification links followed before a chain counts as a loop

Sequence5 = List[Tuple[int, int, int, int, int]]  # (address, file, line, flags, view) rows


class Reader:
    """What reading a unit's parts needs: the sections, the units, the directory, and where code is."""

    def __init__(self, sections: Sections, directory: Directory, code: Sequence[Tuple[int, int]]):
        self.sections = sections
        self.units = UnitReader(sections)
        self.directory = directory
        self.code = sorted(code)

    def in_code(self, low: int, high: int) -> bool:
        for a, b in self.code:
            if a <= low and high <= b:
                return True
        return False

    def code_key(self) -> bytes:
        """The executable sections the parts were cut to, for the cache digest."""
        return repr(self.code).encode()


def _empty() -> Dict[str, array]:
    return {name: array(code) for name, code in ARRAYS}


# -- lines -------------------------------------------------------------------------


def _file_ids(h, comp_dir: str, files: List[str]) -> List[int]:
    """Per entry of the line program's file table, its id in ``files`` (each distinct path appended once),
    or NO_FILE for an entry with no path."""
    ids: Dict[str, int] = {}
    table: List[int] = []
    for entry in h.files:
        path = join_path(h, comp_dir, entry, posixpath)
        if not path:
            table.append(NO_FILE)
            continue
        fid = ids.get(path)
        if fid is None:
            fid = ids[path] = len(files)
            files.append(path)
        table.append(fid)
    return table


def line_part(rd: Reader, ui: int, reads: Reads) -> DwarfIndex:
    """The line rows of unit ``ui`` of the directory, as an index with only rows."""
    d = rd.directory
    offset = d.unit_line[ui]
    A = _empty()
    files: List[str] = []
    if offset == NO_LINES:
        return DwarfIndex("", "", "", files, [], **A)
    h = header(rd.sections, offset, reads)
    table = _file_ids(h, d.strings[d.unit_comp_dir[ui]], files)
    base = h.file_base
    raw = program_rows(rd.sections, h, reads)
    sequences: List[Sequence5] = []
    seq: Sequence5 = []
    for addr, f, line, fl, view in raw:
        if fl & ROW_END:
            seq.append((addr, NO_FILE, 0, FLAG_END, 0))
            sequences.append(seq)
            seq = []
            continue
        i = f - base
        seq.append((addr, table[i] if 0 <= i < len(table) else NO_FILE, line, FLAG_STMT if fl & ROW_STMT else 0,
                    view))
    rows = kept_rows(sequences, rd.in_code)
    _fill_rows(A, rows)
    return DwarfIndex("", "", "", files, [], **A)


def kept_rows(sequences: Sequence[Sequence5], in_code: Callable[[int, int], bool]) -> Sequence5:
    """The sequences in code, by address, overlapping ones dropped; every row kept, in program order.

    Several rows at one address all stay: only the last owns the bytes (every
    consumer looks up the last row at or below an address), the others are
    the views before it -- a call line whose code is all the inlined callee's,
    a function's opening line before its first statement's.
    """
    kept = []
    for seq in sequences:
        if len(seq) < 2:
            continue
        start, end = seq[0][0], seq[-1][0]
        if start >= end or not in_code(start, end):
            continue
        if any(seq[i][0] > seq[i + 1][0] for i in range(len(seq) - 1)):
            continue  # addresses must not decrease within a sequence
        kept.append(seq)
    kept.sort(key=lambda s: (s[0][0], s[-1][0]))
    out: Sequence5 = []
    last_end = -1
    for seq in kept:
        if seq[0][0] < last_end:
            continue
        out.extend(seq)
        last_end = seq[-1][0]
    return out


def _fill_rows(A: Dict[str, array], rows: Sequence5) -> None:
    for addr, f, line, fl, view in rows:
        A["row_addr"].append(addr)
        A["row_file"].append(f)
        A["row_line"].append(line)
        A["row_flags"].append(fl)
        A["row_view"].append(view)
    with_line = (r for r, row in enumerate(rows) if not row[3] & FLAG_END and row[2] and row[1] != NO_FILE)
    order = sorted(with_line, key=lambda r: (rows[r][1], rows[r][2], rows[r][0], r))
    A["line_rows"].extend(order)
    A["line_keys"].extend(rows[r][1] << 32 | rows[r][2] for r in order)


# -- DIEs --------------------------------------------------------------------------


class _Scope:
    __slots__ = ("origin", "ranges", "depth", "scope", "call_file", "call_line", "sub", "die")

    def __init__(self, origin, ranges, depth, scope, call_file, call_line, sub, die):
        self.origin, self.ranges, self.depth, self.scope = origin, ranges, depth, scope
        self.call_file, self.call_line, self.sub, self.die = call_file, call_line, sub, die


class _Walk:
    """One pass over a unit's DIEs (see the module docstring)."""

    def __init__(self, rd: Reader, unit: Unit, reads: Reads, files: List[int]):
        self.rd = rd
        self.unit = unit
        self.reads = reads
        self.files = files  # the unit's file numbers (minus the base) as local file ids
        self.file_base = 0 if unit.version >= 5 else 1
        self.subs: List[_Scope] = []
        self.inlines: List[_Scope] = []
        self.blocks: List[_Scope] = []
        self.sub_inlines: List[List[int]] = []
        self.sub_blocks: List[List[int]] = []
        self.die_name: Dict[int, str] = {}
        self.die_ref: Dict[int, int] = {}
        self.die_decl: Dict[int, Tuple[int, int]] = {}
        self.inline_dies: List[int] = []
        self.declared: List[int] = []

    def file(self, number: int) -> int:
        i = number - self.file_base
        return self.files[i] if 0 <= i < len(self.files) else NO_FILE

    def ranges(self, attrs) -> List[Tuple[int, int]]:
        u = self.unit
        got = attrs.get(S.DW_AT_ranges)
        if got is not None:
            out = range_list(u, got[0], got[1], self.reads)
            # Empty ranges stay: gcc lists one at an inlined copy's entry point first.
            return [r for r in out if r[0] <= r[1] and self.rd.in_code(*r)]
        low, high = attrs.get(S.DW_AT_low_pc), attrs.get(S.DW_AT_high_pc)
        if low is None or high is None:
            return []
        lo = u.address(low[0], low[1], self.reads)
        hi = lo + high[1] if high[0] in S.CONSTANTS else u.address(high[0], high[1], self.reads)
        if lo <= hi and self.rd.in_code(lo, hi):
            return [(lo, hi)]
        return []

    def note_name(self, unit, off: int, attrs) -> bool:
        """Record the DIE's name, else its link to the DIE that names it (abstract origin, then
        specification); False when it has neither.  One rule for this pass's DIEs and foreign ones."""
        name = attrs.get(S.DW_AT_name)
        if name is not None:
            self.die_name[off] = unit.string(name[0], name[1], self.reads)
            return True
        for key in (S.DW_AT_abstract_origin, S.DW_AT_specification):
            got = attrs.get(key)
            if got is not None:
                target = unit.ref(*got)
                if target is not None:
                    self.die_ref[off] = target
                    return True
        return False

    def note_subprogram(self, off: int, attrs) -> None:
        u = self.unit
        self.note_name(u, off, attrs)
        line = attrs.get(S.DW_AT_decl_line)
        if line is not None:
            f = attrs.get(S.DW_AT_decl_file)
            self.die_decl[off] = (self.file(f[1]) if f is not None else NO_FILE, line[1])
        inline = attrs.get(S.DW_AT_inline)
        if inline is not None and inline[1] in (S.DW_INL_inlined, S.DW_INL_declared_inlined):
            self.inline_dies.append(off)
        if off in self.die_name or off in self.die_ref:
            self.declared.append(off)

    def run(self) -> None:
        u = self.unit
        top = u.offset + u.die_start
        ab, _, after = u.die(top)
        if ab is None or not ab.children:
            return
        self.children(after, -1, 0, 0, 0)

    def children(self, pos: int, sub: int, depth: int, scope: int, level: int) -> Tuple[int, bool]:
        """Read the children starting at ``pos``; return where they end and whether one declares a name."""
        if level > MAX_DEPTH:
            raise DwarfError(f".debug_info: DIEs nest deeper than {MAX_DEPTH} in the unit at {self.unit.offset:#x}")
        u = self.unit
        limit = u.offset + u.end
        declares = False
        while True:
            if pos >= limit:
                raise DwarfError(f".debug_info: the unit at {u.offset:#x} ends inside a DIE's children")
            ab, attrs, after = u.die(pos)
            if ab is None:
                return after, declares
            tag = ab.tag
            if tag in _SYMBOLS and any(a in attrs for a in _NAMED):
                declares = True
            if tag == S.DW_TAG_subprogram:
                self.note_subprogram(pos, attrs)
                rng = self.ranges(attrs)
                if rng and ab.children:
                    si = len(self.subs)
                    self.subs.append(_Scope(pos, rng, 0, 0, NO_FILE, 0, si, pos))
                    self.sub_inlines.append([])
                    self.sub_blocks.append([])
                    after, _ = self.children(after, si, 0, 0, level + 1)
                elif rng:
                    si = len(self.subs)
                    self.subs.append(_Scope(pos, rng, 0, 0, NO_FILE, 0, si, pos))
                    self.sub_inlines.append([])
                    self.sub_blocks.append([])
                elif ab.children:
                    after = self.skip(attrs, after)
            elif tag == S.DW_TAG_inlined_subroutine:
                origin_attr = attrs.get(S.DW_AT_abstract_origin)
                origin = u.ref(*origin_attr) if origin_attr is not None else None
                rng = self.ranges(attrs)
                if sub >= 0 and rng and origin is not None:
                    cf, cl = attrs.get(S.DW_AT_call_file), attrs.get(S.DW_AT_call_line)
                    self.sub_inlines[sub].append(len(self.inlines))
                    self.inlines.append(_Scope(origin, rng, depth, scope, self.file(cf[1]) if cf else NO_FILE,
                                               cl[1] if cl else 0, sub, pos))
                if ab.children:
                    after, _ = self.children(after, sub, depth + 1, scope + 1, level + 1)
            elif tag == S.DW_TAG_lexical_block:
                if ab.children and sub >= 0:
                    rng = self.ranges(attrs)
                    bi = len(self.blocks)
                    if rng:
                        self.blocks.append(_Scope(0, rng, depth, scope, NO_FILE, 0, sub, pos))
                    after, has = self.children(after, sub, depth, scope + (1 if rng else 0), level + 1)
                    if rng and (has or self.origin_declares(attrs)):
                        self.sub_blocks[sub].append(bi)
                    elif rng:
                        self.blocks[bi] = None  # type: ignore[call-overload]
                elif ab.children:
                    after, _ = self.children(after, sub, depth, scope, level + 1)
            elif tag in _DESCEND and ab.children:
                after, _ = self.children(after, sub, depth, scope, level + 1)
            elif ab.children:
                after = self.skip(attrs, after)
            pos = after

    def skip(self, attrs, after: int) -> int:
        """Past the children of a DIE whose subtree holds nothing this pass reads."""
        sib = attrs.get(S.DW_AT_sibling)
        u = self.unit
        if sib is not None and isinstance(sib[1], int) and after <= sib[1] <= u.offset + u.end:
            return sib[1]
        return u.skip_children(after)

    def origin_declares(self, attrs) -> bool:
        """Whether the abstract block a concrete lexical block stands for declares a name (gdb gives the
        concrete block the origin's symbols)."""
        got = attrs.get(S.DW_AT_abstract_origin)
        if got is None:
            return False
        target = self.unit.ref(*got)
        if target is None:
            return False
        unit = self.unit if self.unit.offset <= target < self.unit.offset + self.unit.end else \
            self.rd.units.unit_of(target, self.reads)
        for child in unit.children(target):
            ab, cattrs, _ = unit.die(child)
            if ab is not None and ab.tag in _SYMBOLS and any(a in cattrs for a in _NAMED):
                return True
        return False

    # -- names, after the pass -------------------------------------------------------

    def resolve(self, off: int) -> Tuple[Optional[str], int]:
        """The name at the end of ``off``'s origin chain (into other units if need be), and the DIE it was at."""
        for _ in range(MAX_CHAIN):
            name = self.die_name.get(off)
            if name is not None:
                return name, off
            nxt = self.die_ref.get(off)
            if nxt is None:
                if not self.read_foreign(off):
                    return None, off
                name = self.die_name.get(off)
                if name is not None:
                    return name, off
                nxt = self.die_ref.get(off)
                if nxt is None:
                    return None, off
            off = nxt
        return None, off

    def read_foreign(self, off: int) -> bool:
        """Read the name and links of a DIE this pass did not visit (another unit, or a non-subprogram)."""
        if off in self.die_decl or off in self.die_name or off in self.die_ref:
            return False
        u = self.unit
        unit = u if u.offset + u.die_start <= off < u.offset + u.end else self.rd.units.unit_of(off, self.reads)
        ab, attrs, _ = unit.die(off)
        if ab is None:
            return False
        return self.note_name(unit, off, attrs)

    def decl(self, off: int) -> Tuple[int, int]:
        for _ in range(MAX_CHAIN):
            if off in self.die_decl:
                return self.die_decl[off]
            nxt = self.die_ref.get(off)
            if nxt is None:
                break
            off = nxt
        return NO_FILE, 0


def die_part(rd: Reader, ui: int, reads: Reads) -> DwarfIndex:
    """The subprograms, inlined copies and lexical blocks of unit ``ui``, as an index without rows."""
    d = rd.directory
    unit = rd.units.unit(d.unit_offset[ui], reads)
    files: List[str] = []
    local: List[int] = []
    if d.unit_line[ui] != NO_LINES:
        h = header(rd.sections, d.unit_line[ui], reads)
        local = _file_ids(h, d.strings[d.unit_comp_dir[ui]], files)
    w = _Walk(rd, unit, reads, local)
    w.run()
    names: List[str] = []
    name_ids: Dict[str, int] = {}

    def name_id(name: Optional[str]) -> int:
        name = name or "?"
        nid = name_ids.get(name)
        if nid is None:
            nid = name_ids[name] = len(names)
            names.append(name)
        return nid

    flags: Dict[int, int] = {}
    for off in w.declared:
        nid = name_id(w.resolve(off)[0])
        flags[nid] = flags.get(nid, 0) | NAME_DECLARED
    for off in w.inline_dies:
        nid = name_id(w.resolve(off)[0])
        flags[nid] = flags.get(nid, 0) | NAME_INLINE
    A = _empty()
    for si, sub in enumerate(w.subs):
        name, _ = w.resolve(sub.origin)
        dfile, dline = w.decl(sub.origin)
        A["sub_name"].append(name_id(name))
        A["sub_file"].append(dfile)
        A["sub_line"].append(dline)
        A["sub_die"].append(sub.die)
        _ranges_into(A, "sub", sub.ranges)
        A["sub_inl_first"].append(len(A["inl_name"]))
        A["sub_inl_count"].append(len(w.sub_inlines[si]))
        for ii in w.sub_inlines[si]:
            inl = w.inlines[ii]
            A["inl_name"].append(name_id(w.resolve(inl.origin)[0]))
            A["inl_depth"].append(inl.depth)
            A["inl_scope"].append(inl.scope)
            A["inl_call_file"].append(inl.call_file)
            A["inl_call_line"].append(inl.call_line)
            A["inl_sub"].append(si)
            _ranges_into(A, "inl", inl.ranges)
        A["sub_blk_first"].append(len(A["blk_sub"]))
        A["sub_blk_count"].append(len(w.sub_blocks[si]))
        for bi in w.sub_blocks[si]:
            blk = w.blocks[bi]
            A["blk_scope"].append(blk.scope)
            A["blk_sub"].append(si)
            _ranges_into(A, "blk", blk.ranges)
    _fill_spans(A)
    A["name_flags"].extend(flags.get(i, 0) for i in range(len(names)))
    return DwarfIndex("", "", "", files, names, **A)


def _ranges_into(A: Dict[str, array], prefix: str, ranges: Sequence[Tuple[int, int]]) -> None:
    A[f"{prefix}_rng_first"].append(len(A["rng_low"]))
    A[f"{prefix}_rng_count"].append(len(ranges))
    for low, high in ranges:
        A["rng_low"].append(low)
        A["rng_high"].append(high)


def _fill_spans(A: Dict[str, array]) -> None:
    spans = []
    for si in range(len(A["sub_name"])):
        first = A["sub_rng_first"][si]
        for k in range(first, first + A["sub_rng_count"][si]):
            if A["rng_low"][k] < A["rng_high"][k]:
                spans.append((A["rng_low"][k], A["rng_high"][k], si))
    spans.sort()
    for low, high, si in spans:
        A["span_low"].append(low)
        A["span_high"].append(high)
        A["span_sub"].append(si)


# -- joining parts -----------------------------------------------------------------


def merge(parts: Sequence[DwarfIndex], build_id: str, image: str, debug: str,
          in_code: Callable[[int, int], bool]) -> DwarfIndex:
    """One index of several units' parts: files and names joined, rows of every part by address (sequences
    that overlap one already kept dropped), subprograms and their copies concatenated."""
    files: List[str] = []
    file_ids: Dict[str, int] = {}
    names: List[str] = []
    name_ids: Dict[str, int] = {}
    flags: Dict[int, int] = {}
    sequences: List[Sequence5] = []
    A = _empty()
    for part in parts:
        fmap = []
        for path in part.files:
            got = file_ids.get(path)
            if got is None:
                got = file_ids[path] = len(files)
                files.append(path)
            fmap.append(got)
        nmap = []
        for i, name in enumerate(part.names):
            got = name_ids.get(name)
            if got is None:
                got = name_ids[name] = len(names)
                names.append(name)
            nmap.append(got)
            flags[got] = flags.get(got, 0) | part.name_flags[i]

        def fid(f: int) -> int:
            return NO_FILE if f == NO_FILE or f >= len(fmap) else fmap[f]

        seq: Sequence5 = []
        for r in range(len(part.row_addr)):
            fl = part.row_flags[r]
            seq.append((part.row_addr[r], fid(part.row_file[r]), part.row_line[r], fl, part.row_view[r]))
            if fl & FLAG_END:
                sequences.append(seq)
                seq = []
        _append_dies(A, part, nmap, fid)
    rows = kept_rows(sequences, in_code)
    _fill_rows(A, rows)
    _fill_spans(A)
    A["name_flags"].extend(flags.get(i, 0) for i in range(len(names)))
    return DwarfIndex(build_id, image, debug, files, names, **A)


def _append_dies(A: Dict[str, array], part: DwarfIndex, nmap: List[int], fid) -> None:
    sub0, inl0, blk0, rng0 = len(A["sub_name"]), len(A["inl_name"]), len(A["blk_sub"]), len(A["rng_low"])
    A["rng_low"].extend(part.rng_low)
    A["rng_high"].extend(part.rng_high)
    for s in range(len(part.sub_name)):
        A["sub_name"].append(nmap[part.sub_name[s]])
        A["sub_file"].append(fid(part.sub_file[s]))
        A["sub_line"].append(part.sub_line[s])
        A["sub_die"].append(part.sub_die[s])
        A["sub_rng_first"].append(part.sub_rng_first[s] + rng0)
        A["sub_rng_count"].append(part.sub_rng_count[s])
        A["sub_inl_first"].append(part.sub_inl_first[s] + inl0)
        A["sub_inl_count"].append(part.sub_inl_count[s])
        A["sub_blk_first"].append(part.sub_blk_first[s] + blk0)
        A["sub_blk_count"].append(part.sub_blk_count[s])
    for i in range(len(part.inl_name)):
        A["inl_name"].append(nmap[part.inl_name[i]])
        A["inl_depth"].append(part.inl_depth[i])
        A["inl_scope"].append(part.inl_scope[i])
        A["inl_call_file"].append(fid(part.inl_call_file[i]))
        A["inl_call_line"].append(part.inl_call_line[i])
        A["inl_rng_first"].append(part.inl_rng_first[i] + rng0)
        A["inl_rng_count"].append(part.inl_rng_count[i])
        A["inl_sub"].append(part.inl_sub[i] + sub0)
    for b in range(len(part.blk_sub)):
        A["blk_scope"].append(part.blk_scope[b])
        A["blk_rng_first"].append(part.blk_rng_first[b] + rng0)
        A["blk_rng_count"].append(part.blk_rng_count[b])
        A["blk_sub"].append(part.blk_sub[b] + sub0)
