"""Build a ``DwarfIndex`` from an image's DWARF with pyelftools.

One pass over the compile units reads, per unit, the line program (every
row of every sequence, ``is_stmt`` kept) and the DIEs that can hold code:
subprograms, lexical blocks and inlined subroutines, descending only where
those can occur.  DWARF 4 and 5 differ in three places this module handles:
file numbers (from 1 in 4, from 0 in 5, for line rows, ``DW_AT_decl_file``
and ``DW_AT_call_file`` alike), directory 0 (the compilation directory in
5), and range lists (``.debug_ranges`` against ``.debug_rnglists``, where
pyelftools already resolves ``DW_FORM_rnglistx``).

Names are resolved after the pass, because ``DW_AT_abstract_origin`` and
``DW_AT_specification`` may point into another unit: an inlined copy or an
out-of-line instance is named by the DIE its origin chain ends at.  File
paths are the compilation directory, the directory entry and the file name
joined as LLVM's symbolizer joins them, then normalised.
"""

from __future__ import annotations

import posixpath
from array import array
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from elftools.common.exceptions import DWARFError, ELFError
from elftools.construct.core import ConstructError

from .dwarfindex import (
    ARRAYS, FLAG_END, FLAG_STMT, NAME_DECLARED, NAME_INLINE, NO_FILE, DwarfIndex,
)
from ..common.errors import UserError
from ..image.elf import KernelImage

_REF_CU = ("DW_FORM_ref1", "DW_FORM_ref2", "DW_FORM_ref4", "DW_FORM_ref8", "DW_FORM_ref_udata")
_CONSTANT = ("DW_FORM_data1", "DW_FORM_data2", "DW_FORM_data4", "DW_FORM_data8", "DW_FORM_udata",
             "DW_FORM_sdata", "DW_FORM_implicit_const")
# DIEs whose children may include subprograms or inlined copies.
_DESCEND = frozenset(("DW_TAG_lexical_block", "DW_TAG_namespace", "DW_TAG_module", "DW_TAG_class_type",
                      "DW_TAG_structure_type", "DW_TAG_union_type"))
_BAD_DWARF = (DWARFError, ELFError, ConstructError, ValueError, KeyError, IndexError, AssertionError,
              NotImplementedError)


@dataclass
class _Sub:
    origin: int  # the DIE offset its name comes from
    ranges: List[Tuple[int, int]]
    first_inline: int = 0
    inlines: List[int] = field(default_factory=list)


@dataclass
class _Inline:
    origin: int
    depth: int
    call_file: int
    call_line: int
    ranges: List[Tuple[int, int]]
    sub: int


class _Reader:
    """State of one pass over the units (see the module docstring)."""

    def __init__(self, img: KernelImage, dwarf) -> None:
        self.img = img
        self.dwarf = dwarf
        self.ranges = dwarf.range_lists()
        self.code = sorted((s.addr, s.addr + s.size) for s in img.sections if s.executable)
        self.files: List[str] = []
        self.file_ids: Dict[str, int] = {}
        self.sequences: List[List[Tuple[int, int, int, int]]] = []
        self.subs: List[_Sub] = []
        self.inlines: List[_Inline] = []
        self.die_name: Dict[int, str] = {}  # subprogram DIE offset -> DW_AT_name
        self.die_ref: Dict[int, int] = {}  # subprogram DIE offset -> origin/specification offset
        self.die_decl: Dict[int, Tuple[int, int]] = {}  # DIE offset -> (decl file, decl line)
        self.inline_dies: List[int] = []  # DIE offsets with DW_AT_inline

    # -- helpers ------------------------------------------------------------

    def in_code(self, low: int, high: int) -> bool:
        for a, b in self.code:
            if a <= low and high <= b:
                return True
        return False

    def file_id(self, path: str) -> int:
        fid = self.file_ids.get(path)
        if fid is None:
            fid = self.file_ids[path] = len(self.files)
            self.files.append(path)
        return fid

    # -- one unit -------------------------------------------------------------

    def unit(self, cu) -> None:
        top = cu.get_top_DIE()
        version = cu["version"]
        comp_dir = _text(top.attributes.get("DW_AT_comp_dir"))
        lp = self.dwarf.line_program_for_CU(cu)
        files = self.file_table(lp, comp_dir) if lp is not None else []
        base = version >= 5
        self.cu_files = files
        self.cu_file_base = 0 if base else 1
        if lp is not None:
            self.line_rows(lp)
        low = top.attributes.get("DW_AT_low_pc")
        self.cu_base = low.value if low is not None and isinstance(low.value, int) else 0
        self.cu = cu
        self.walk(top, -1, 0)

    def file_table(self, lp, comp_dir: str) -> List[int]:
        """The unit's file numbers as global file ids (the list index is the DWARF number minus the base)."""
        version = lp["version"]
        dirs = [_text(d) for d in lp["include_directory"]]
        out = []
        for entry in lp["file_entry"]:
            name = _text(entry.name)
            d = entry.dir_index
            if version >= 5:
                include = dirs[d] if d < len(dirs) else ""
                prefix = "" if d == 0 or include.startswith("/") else comp_dir
            else:
                include = dirs[d - 1] if 0 < d <= len(dirs) else ""
                prefix = "" if include.startswith("/") else comp_dir
            path = posixpath.join(prefix, include, name) if name else ""
            out.append(self.file_id(posixpath.normpath(path)) if path else NO_FILE)
        return out

    def global_file(self, number: int) -> int:
        i = number - self.cu_file_base
        return self.cu_files[i] if 0 <= i < len(self.cu_files) else NO_FILE

    def line_rows(self, lp) -> None:
        seq: List[Tuple[int, int, int, int]] = []
        for entry in lp.get_entries():
            st = entry.state
            if st is None:
                continue
            if st.end_sequence:
                seq.append((st.address, NO_FILE, 0, FLAG_END))
                self.sequences.append(seq)
                seq = []
                continue
            flags = FLAG_STMT if st.is_stmt else 0
            seq.append((st.address, self.global_file(st.file), st.line, flags))

    # -- DIEs -----------------------------------------------------------------

    def ref(self, attr, cu) -> Optional[int]:
        if attr.form in _REF_CU:
            return cu.cu_offset + attr.raw_value
        if attr.form == "DW_FORM_ref_addr":
            return attr.raw_value
        return None  # a supplementary (dwz) file or a type unit: no name from here

    def die_ranges(self, die) -> List[Tuple[int, int]]:
        a = die.attributes
        if "DW_AT_ranges" in a:
            if self.ranges is None:
                return []
            out = []
            base = self.cu_base
            for e in self.ranges.get_range_list_at_offset(a["DW_AT_ranges"].value, cu=self.cu):
                if hasattr(e, "base_address"):
                    base = e.base_address
                    continue
                low, high = (e.begin_offset, e.end_offset) if e.is_absolute else (base + e.begin_offset,
                                                                                  base + e.end_offset)
                out.append((low, high))
            # Empty ranges stay: gcc lists one at an inlined copy's entry point first.
            return [r for r in out if r[0] <= r[1] and self.in_code(*r)]
        low = a.get("DW_AT_low_pc")
        high = a.get("DW_AT_high_pc")
        if low is None or high is None or not isinstance(low.value, int):
            return []
        end = low.value + high.value if high.form in _CONSTANT else high.value
        if low.value <= end and self.in_code(low.value, end):
            return [(low.value, end)]
        return []

    def note_subprogram(self, die) -> int:
        """Record a subprogram DIE's name, origin and declaration; return the offset its name comes from."""
        a = die.attributes
        off = die.offset
        name = a.get("DW_AT_name")
        if name is not None:
            self.die_name[off] = _text(name)
        else:
            for key in ("DW_AT_abstract_origin", "DW_AT_specification"):
                if key in a:
                    target = self.ref(a[key], die.cu)
                    if target is not None:
                        self.die_ref[off] = target
                    break
        if "DW_AT_decl_line" in a:
            f = a.get("DW_AT_decl_file")
            decl_file = self.global_file(f.value) if f is not None else NO_FILE
            self.die_decl[off] = (decl_file, a["DW_AT_decl_line"].value)
        if "DW_AT_inline" in a and a["DW_AT_inline"].value in (1, 3):  # DW_INL_inlined, DW_INL_declared_inlined
            self.inline_dies.append(off)
        return off

    def walk(self, die, sub: int, depth: int) -> None:
        for child in die.iter_children():
            tag = child.tag
            if tag == "DW_TAG_subprogram":
                origin = self.note_subprogram(child)
                ranges = self.die_ranges(child)
                if ranges:
                    self.subs.append(_Sub(origin, ranges))
                    self.walk(child, len(self.subs) - 1, 0)
            elif tag == "DW_TAG_inlined_subroutine":
                a = child.attributes
                origin_attr = a.get("DW_AT_abstract_origin")
                origin = self.ref(origin_attr, child.cu) if origin_attr is not None else None
                ranges = self.die_ranges(child)
                if sub >= 0 and ranges and origin is not None:
                    cf = a.get("DW_AT_call_file")
                    cl = a.get("DW_AT_call_line")
                    self.subs[sub].inlines.append(len(self.inlines))
                    self.inlines.append(_Inline(
                        origin, depth, self.global_file(cf.value) if cf is not None else NO_FILE,
                        cl.value if cl is not None else 0, ranges, sub,
                    ))
                self.walk(child, sub, depth + 1)
            elif tag in _DESCEND:
                self.walk(child, sub, depth)

    # -- after the pass ---------------------------------------------------------

    def resolve(self, off: int) -> Tuple[Optional[str], int]:
        """The name at the end of ``off``'s origin chain, and the DIE it was found at."""
        for _ in range(16):
            name = self.die_name.get(off)
            if name is not None:
                return name, off
            nxt = self.die_ref.get(off)
            if nxt is None:
                return None, off
            off = nxt
        return None, off

    def decl(self, off: int) -> Tuple[int, int]:
        for _ in range(16):
            if off in self.die_decl:
                return self.die_decl[off]
            nxt = self.die_ref.get(off)
            if nxt is None:
                break
            off = nxt
        return NO_FILE, 0


def _text(value) -> str:
    """A DWARF string (bytes from pyelftools, or an attribute holding them) as text."""
    if value is None:
        return ""
    if hasattr(value, "value"):
        value = value.value
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)


def _rows(sequences: Sequence[List[Tuple[int, int, int, int]]], in_code) -> List[Tuple[int, int, int, int]]:
    """The sequences in code, by address, each without rows that own no bytes, overlaps dropped.

    Of several rows at one address only the last owns bytes (every consumer
    looks up the last row at or below an address).  gcc often writes a
    statement row and then, at the same address, a non-statement row of the
    same line (a new column or view): the row kept is then ``is_stmt``, as the
    line does begin a statement there.
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
    out: List[Tuple[int, int, int, int]] = []
    last_end = -1
    for seq in kept:
        if seq[0][0] < last_end:
            continue
        stmt_lines = set()  # (file, line) of the is_stmt rows at the current address
        for i, row in enumerate(seq[:-1]):
            if row[3] & FLAG_STMT:
                stmt_lines.add((row[1], row[2]))
            if seq[i + 1][0] != row[0]:
                if (row[1], row[2]) in stmt_lines:
                    row = (row[0], row[1], row[2], row[3] | FLAG_STMT)
                out.append(row)
                stmt_lines.clear()
        out.append(seq[-1])
        last_end = seq[-1][0]
    return out


Progress = Callable[[int, int], None]  # (bytes of .debug_info read, of all)


def build(img: KernelImage, dwarf_img: KernelImage, progress: Optional[Progress] = None) -> DwarfIndex:
    """Read ``dwarf_img``'s DWARF (``img``'s own, or its debug file's) into an index of ``img``.

    Malformed DWARF is a one-line UserError naming the file.
    """
    try:
        return _build(img, dwarf_img, progress)
    except _BAD_DWARF as e:
        detail = " ".join(str(e).split()) or type(e).__name__
        raise UserError(f"{dwarf_img.path}: corrupt or unsupported DWARF ({detail})") from None


def _build(img: KernelImage, dwarf_img: KernelImage, progress: Optional[Progress]) -> DwarfIndex:
    rd = _Reader(img, dwarf_img.dwarf_info())
    total = rd.dwarf.debug_info_sec.size
    for cu in rd.dwarf.iter_CUs():
        rd.unit(cu)
        if progress is not None:
            progress(cu.cu_offset + cu.size, total)
    rows = _rows(rd.sequences, rd.in_code)

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
    for off in list(rd.die_name) + list(rd.die_ref):
        nid = name_id(rd.resolve(off)[0])
        flags[nid] = flags.get(nid, 0) | NAME_DECLARED
    for off in rd.inline_dies:
        nid = name_id(rd.resolve(off)[0])
        flags[nid] = flags.get(nid, 0) | NAME_INLINE

    arrays = {name: array(code) for name, code in ARRAYS}
    A = arrays
    for addr, f, line, fl in rows:
        A["row_addr"].append(addr)
        A["row_file"].append(f)
        A["row_line"].append(line)
        A["row_flags"].append(fl)
    with_line = (r for r, row in enumerate(rows) if not row[3] & FLAG_END and row[2] and row[1] != NO_FILE)
    order = sorted(with_line, key=lambda r: (rows[r][1], rows[r][2], rows[r][0]))
    A["line_rows"].extend(order)
    A["line_keys"].extend(rows[r][1] << 32 | rows[r][2] for r in order)

    spans = []
    for si, sub in enumerate(rd.subs):
        name, _ = rd.resolve(sub.origin)
        dfile, dline = rd.decl(sub.origin)
        A["sub_name"].append(name_id(name))
        A["sub_file"].append(dfile)
        A["sub_line"].append(dline)
        A["sub_rng_first"].append(len(A["rng_low"]))
        A["sub_rng_count"].append(len(sub.ranges))
        for low, high in sub.ranges:
            A["rng_low"].append(low)
            A["rng_high"].append(high)
            if low < high:
                spans.append((low, high, si))
        A["sub_inl_first"].append(len(A["inl_name"]))
        A["sub_inl_count"].append(len(sub.inlines))
        for ii in sub.inlines:
            inl = rd.inlines[ii]
            A["inl_name"].append(name_id(rd.resolve(inl.origin)[0]))
            A["inl_depth"].append(inl.depth)
            A["inl_call_file"].append(inl.call_file)
            A["inl_call_line"].append(inl.call_line)
            A["inl_rng_first"].append(len(A["rng_low"]))
            A["inl_rng_count"].append(len(inl.ranges))
            A["inl_sub"].append(si)
            for low, high in inl.ranges:
                A["rng_low"].append(low)
                A["rng_high"].append(high)
    spans.sort()
    for low, high, si in spans:
        A["span_low"].append(low)
        A["span_high"].append(high)
        A["span_sub"].append(si)
    A["name_flags"].extend(flags.get(i, 0) for i in range(len(names)))
    return DwarfIndex(
        build_id=img.build_id or "",
        image=img.path,
        debug=dwarf_img.path,
        files=rd.files,
        names=names,
        **arrays,
    )
