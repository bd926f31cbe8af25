"""kinstkit's own DWARF reader (``generator/image/dwarf/``: unit headers, abbreviations, DIEs and their
attribute values, line programs) held to pyelftools, which it replaced on the hot paths, on real images:
the sample kernel (clang, DWARF 4) and Lua 5.4 built by gcc (DWARF 5) and clang (DWARF 4).  Every unit
header, every DIE's offset, tag and every attribute's form and value, and every row of every line program
must be pyelftools' (``test_dwarf_oracle`` and ``test_vars_oracle`` hold what is built on them to
llvm-dwarfdump and llvm-symbolizer)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

from elftools.dwarf.enums import ENUM_DW_AT, ENUM_DW_FORM, ENUM_DW_TAG
from elftools.elf.elffile import ELFFile

from generator.image.dwarf import spec as S
from generator.image.dwarf.lineprog import ROW_END, ROW_STMT, header, rows
from generator.image.dwarf.sections import Sections
from generator.image.dwarf.units import UnitReader, unit_headers
from generator.image.elf import KernelImage

_REFS = {S.DW_FORM_ref1, S.DW_FORM_ref2, S.DW_FORM_ref4, S.DW_FORM_ref8, S.DW_FORM_ref_udata}


def _code(table: Dict[str, int], name) -> int:
    return name if isinstance(name, int) else table[name]


def _theirs(attr, form: int, cu_offset: int):
    """pyelftools' raw value as kinstkit's reader gives it: references as .debug_info offsets, blocks as bytes."""
    value = attr.raw_value
    if form == S.DW_FORM_flag_present:  # pyelftools: no bytes, the value True
        return 1 if attr.value is True else attr.value
    if form in _REFS:
        return value + cu_offset
    if isinstance(value, list):
        return bytes(value)
    return value


def _ours(value, form: int):
    if form == S.DW_FORM_flag_present:
        return 1 if value in (True, 1, None) else value
    return value


def _compare(path: Path) -> Tuple[int, int, int, List[str]]:
    """(units, DIEs, rows) compared, and the differences."""
    img = KernelImage.open(str(path))
    sections = Sections(img)
    reader = UnitReader(sections)
    diffs: List[str] = []
    ndies = nrows = 0
    with open(path, "rb") as f:
        dwarf = ELFFile(f).get_dwarf_info()
        cus = list(dwarf.iter_CUs())
        heads = list(unit_headers(sections.get(".debug_info")))
        if [h.offset for h in heads] != [cu.cu_offset for cu in cus]:
            return len(cus), 0, 0, ["unit offsets differ"]
        for h, cu in zip(heads, cus):
            if (h.version, h.addr_size, h.abbrev_offset, h.offset + h.die_start) != (
                    cu["version"], cu["address_size"], cu["debug_abbrev_offset"], cu.cu_die_offset):
                diffs.append(f"unit {h.offset:#x}: header {h} against pyelftools' {cu.header}")
                continue
            unit = reader.unit(h.offset)
            theirs = {d.offset: d for d in cu.iter_DIEs() if not d.is_null()}
            at = h.offset + h.die_start
            end = h.offset + h.end
            while at < end:
                ab, attrs, nxt = unit.die(at)
                if ab is not None:
                    ndies += 1
                    d = theirs.pop(at, None)
                    if d is None:
                        diffs.append(f"DIE {at:#x}: pyelftools has none there")
                    else:
                        if ab.tag != _code(ENUM_DW_TAG, d.tag):
                            diffs.append(f"DIE {at:#x}: tag {ab.tag:#x}, pyelftools {d.tag}")
                        want = {_code(ENUM_DW_AT, a.name): (_code(ENUM_DW_FORM, a.form), a) for a in d.attributes.values()}
                        for code, (form, value) in attrs.items():
                            pair = want.get(code)
                            if pair is None:
                                diffs.append(f"DIE {at:#x}: attribute {code:#x} not in pyelftools'")
                                continue
                            tform, a = pair
                            if tform != form:
                                diffs.append(f"DIE {at:#x} attribute {code:#x}: form {form:#x}, pyelftools {a.form}")
                                continue
                            if _ours(value, form) != _theirs(a, form, cu.cu_offset):
                                diffs.append(f"DIE {at:#x} {S.FORM_NAMES.get(form, form)} attribute {code:#x}: "
                                             f"{value!r}, pyelftools {a.raw_value!r}")
                at = nxt
            diffs += [f"DIE {o:#x}: kinstkit's reader never reached it" for o in theirs]
            top = cu.get_top_DIE()
            if "DW_AT_stmt_list" not in top.attributes:
                continue
            prog = dwarf.line_program_for_CU(cu)
            want_rows = [(s.address, s.file, s.line, bool(s.is_stmt), bool(s.end_sequence))
                         for s in (e.state for e in prog.get_entries()) if s is not None]
            got = [(r[0], r[1], r[2], bool(r[3] & ROW_STMT), bool(r[3] & ROW_END))
                   for r in rows(sections, header(sections, top.attributes["DW_AT_stmt_list"].value), addr_size=h.addr_size)]
            nrows += len(got)
            if got != want_rows:
                first = next((i for i, (a, b) in enumerate(zip(got, want_rows)) if a != b), min(len(got), len(want_rows)))
                diffs.append(f"line program of unit {h.offset:#x}: {len(got)} rows, pyelftools {len(want_rows)}; "
                             f"first difference at row {first}: {got[first:first + 1]} against {want_rows[first:first + 1]}")
    return len(cus), ndies, nrows, diffs


def _check(path: Path, min_dies: int, min_rows: int) -> None:
    units, dies, nrows, diffs = _compare(path)
    assert not diffs, f"{len(diffs)} differences:\n" + "\n".join(diffs[:15])
    assert dies >= min_dies and nrows >= min_rows, (units, dies, nrows)


def test_sample_kernel_reads_as_pyelftools_reads_it(sample_kernel):
    _check(sample_kernel, 500, 500)


def test_lua_gcc_dwarf5_reads_as_pyelftools_reads_it(lua_gcc):
    _check(lua_gcc, 20000, 20000)


def test_lua_clang_dwarf4_reads_as_pyelftools_reads_it(lua_clang):
    _check(lua_clang, 10000, 10000)
