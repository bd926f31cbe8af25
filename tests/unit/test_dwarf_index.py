"""The line and inline index and its cache, on hand-made data: lookups, row rules, and a cache never trusted.

The index is read from real compilers' DWARF in tests/toolchain/ and held
to LLVM's reading there; these tests pin the rules that reading relies on
with data small enough to reason about: which row owns an address, what a
file suffix matches, how inlined copies nest, and that any damage to a
cache file makes it unusable rather than wrong.
"""

from __future__ import annotations

import zlib
from array import array
from pathlib import Path
from typing import Dict, List

import pytest

from generator.analysis import indexcache
from generator.analysis.dwarfindex import ARRAYS, FLAG_END, FLAG_STMT, NO_FILE, DwarfIndex
from generator.analysis.dwarfread import kept_rows
from generator.analysis.lines import parse_spec
from generator.common.errors import UserError
from generator.image import debuginfo
from generator.dscript.scripts import d_string

BASE = 0x1000


def make_index() -> DwarfIndex:
    """Two files; f at [0x1000, 0x1040) with one copy of g inlined at [0x1010, 0x1020) and one of h inside it,
    and a lexical block at [0x1030, 0x1040) that declares a name.  At 0x1008 line 11 has no bytes of its own
    (view 0) before line 12's (view 1): a call line whose code is the callee's."""
    a: Dict[str, array] = {name: array(code) for name, code in ARRAYS}
    rows = [  # (address, file, line, flags, view)
        (0x1000, 0, 10, FLAG_STMT, 0), (0x1008, 0, 11, FLAG_STMT, 0), (0x1008, 0, 12, 0, 1),
        (0x1010, 1, 3, FLAG_STMT, 0), (0x1018, 1, 4, 0, 0), (0x1020, 0, 11, 0, 0), (0x1030, 0, 13, FLAG_STMT, 0),
        (0x1038, 0, 11, FLAG_STMT, 0), (0x1040, NO_FILE, 0, FLAG_END, 0),
    ]
    for addr, f, line, fl, view in rows:
        a["row_addr"].append(addr)
        a["row_file"].append(f)
        a["row_line"].append(line)
        a["row_flags"].append(fl)
        a["row_view"].append(view)
    order = sorted((i for i, r in enumerate(rows) if not r[3] & FLAG_END), key=lambda i: (rows[i][1], rows[i][2], i))
    a["line_rows"].extend(order)
    a["line_keys"].extend(rows[i][1] << 32 | rows[i][2] for i in order)
    for name, value in (("sub_name", 0), ("sub_file", 0), ("sub_line", 9), ("sub_rng_first", 0), ("sub_rng_count", 1),
                        ("sub_inl_first", 0), ("sub_inl_count", 2), ("sub_die", 0x40), ("sub_blk_first", 0),
                        ("sub_blk_count", 1)):
        a[name].append(value)
    a["rng_low"].extend([0x1000, 0x1010, 0x1018, 0x1030])
    a["rng_high"].extend([0x1040, 0x1020, 0x1020, 0x1040])
    a["span_low"].append(0x1000)
    a["span_high"].append(0x1040)
    a["span_sub"].append(0)
    for name, values in (("inl_name", [1, 2]), ("inl_depth", [0, 1]), ("inl_call_file", [0, 1]),
                         ("inl_call_line", [11, 4]), ("inl_rng_first", [1, 2]), ("inl_rng_count", [1, 1]),
                         ("inl_sub", [0, 0]), ("inl_scope", [0, 1])):
        a[name].extend(values)
    for name, values in (("blk_scope", [0]), ("blk_rng_first", [3]), ("blk_rng_count", [1]), ("blk_sub", [0])):
        a[name].extend(values)
    a["name_flags"].extend([2, 3, 3])
    return DwarfIndex("ab" * 20, "img", "img", ["/src/kern/vm_fault.c", "/src/sys/inline.h"], ["f", "g", "h"], **a)


class _NoSymbols:
    """An image whose symbol table holds nothing: the index's subprograms say where code is."""

    path = "img"

    def function_at(self, address):
        return None


def test_the_row_at_an_address():
    ix = make_index()
    assert ix.line_of(0x1000) == ("/src/kern/vm_fault.c", 10, True)
    assert ix.line_of(0x1008) == ("/src/kern/vm_fault.c", 12, False)  # the last row at an address owns it
    assert ix.line_of(0x1017) == ("/src/sys/inline.h", 3, True)
    assert ix.line_of(0x1018) == ("/src/sys/inline.h", 4, False)
    assert ix.line_of(0x0FFF) is None and ix.line_of(0x1040) is None  # before and at the END row


def test_rows_that_share_an_address_are_views():
    ix = make_index()
    assert not ix.owns(1) and ix.owns(2) and ix.owns(0)
    assert list(ix.rows_at(1)) == [1, 2] and list(ix.rows_at(2)) == [1, 2] and list(ix.rows_at(0)) == [0]


def test_rows_of_a_line_and_the_lines_of_a_file():
    ix = make_index()
    assert ix.rows_of_line(0, 11) == [1, 5, 7]
    assert ix.rows_of_line(0, 14) == []
    assert ix.lines_of_file(0) == [10, 11, 12, 13] and ix.lines_of_file(1) == [3, 4]
    assert list(ix.rows_between(0x1008, 0x1020)) == [1, 2, 3, 4]


def test_gdbs_blocks():
    ix = make_index()
    assert ix.block_at(0x1000) == ("sub", 0) and ix.block_at(0x101C) == ("inl", 1)
    assert ix.block_at(0x1012) == ("inl", 0) and ix.block_at(0x1034) == ("blk", 0) and ix.block_at(0x2000) is None


def test_sites_are_run_starts_and_gdbs_first_statement_per_block():
    """Line 11: a statement row with no bytes at 0x1008 (gdb's breakpoint; the instruction is line 12's), a
    run of its own bytes at 0x1020 (no statement row, so no gdb location), and a statement row at 0x1038 in
    the lexical block -- gdb's first for that block."""
    from generator.analysis.lines import site_rows

    ix = make_index()
    assert site_rows(_NoSymbols(), ix, ix.rows_of_line(0, 11)) == [1, 5, 7]
    assert site_rows(_NoSymbols(), ix, ix.rows_of_line(0, 12)) == [2]  # owns 0x1008, begins a run there
    assert site_rows(_NoSymbols(), ix, ix.rows_of_line(1, 4)) == [4]


@pytest.mark.parametrize("suffix, found", [
    ("vm_fault.c", [0]), ("kern/vm_fault.c", [0]), ("/src/kern/vm_fault.c", [0]), ("./vm_fault.c", [0]),
    ("ault.c", []), ("src/kern/../kern/vm_fault.c", [0]), ("inline.h", [1]), ("nosuch.c", []),
])
def test_files_match_by_whole_path_components(suffix, found):
    assert make_index().files_matching(suffix) == found


def test_inlined_copies_innermost_first():
    ix = make_index()
    assert [ix.names[ix.inl_name[i]] for i in ix.inline_chain(0x101C)] == ["h", "g"]
    assert [ix.names[ix.inl_name[i]] for i in ix.inline_chain(0x1010)] == ["g"]
    assert ix.inline_chain(0x1030) == [] and ix.inline_chain(0x2000) == []
    assert ix.inlines_named("g") == [0] and ix.subs_named("f") == [0] and ix.inlines_named("f") == []


def test_every_row_of_sequences_in_code_is_kept():
    code = lambda lo, hi: 0x1000 <= lo and hi <= 0x2000  # noqa: E731
    seq = [(0x1000, 0, 5, FLAG_STMT, 0), (0x1000, 0, 6, FLAG_STMT, 1), (0x1000, 0, 6, 0, 2), (0x1004, 0, 7, 0, 0),
           (0x1008, NO_FILE, 0, FLAG_END, 0)]
    assert kept_rows([seq], code) == seq
    discarded = [(0x0, 0, 1, 0, 0), (0x10, NO_FILE, 0, FLAG_END, 0)]  # the linker dropped it: DWARF left at 0
    overlapping = [(0x1004, 0, 9, 0, 0), (0x1010, NO_FILE, 0, FLAG_END, 0)]
    backwards = [(0x1800, 0, 1, 0, 0), (0x1700, 0, 2, 0, 0), (0x1900, NO_FILE, 0, FLAG_END, 0)]
    assert kept_rows([overlapping, discarded, seq, backwards], code) == seq


def test_the_cache_round_trips():
    ix = make_index()
    back = indexcache.loads(indexcache.dumps(ix))
    for name, _ in ARRAYS:
        assert getattr(back, name) == getattr(ix, name), name
    assert (back.files, back.names, back.build_id) == (ix.files, ix.names, ix.build_id)


def _damaged(data: bytes) -> List[bytes]:
    flipped = bytearray(data)
    flipped[-5] ^= 0x40
    return [b"", data[:10], data[: len(data) // 2], bytes(flipped), data + b"\0", b"X" + data[1:]]


def test_a_damaged_cache_is_never_used(tmp_path: Path):
    data = indexcache.dumps(make_index())
    for i, bad in enumerate(_damaged(data)):
        with pytest.raises(indexcache.CorruptIndex):
            indexcache.loads(bad)
        path = tmp_path / f"{i}.idx"
        path.write_bytes(bad)
        assert indexcache.load(path) is None
    assert indexcache.load(tmp_path / "missing.idx") is None


def test_an_index_pointing_past_its_tables_is_refused_even_with_a_good_digest():
    ix = make_index()
    ix.inl_name[0] = 99  # a name that does not exist
    with pytest.raises(indexcache.CorruptIndex, match="inl_name"):
        indexcache.loads(indexcache.dumps(ix))
    ix = make_index()
    ix.inl_rng_count[1] = 5  # ranges past the range arrays
    with pytest.raises(indexcache.CorruptIndex, match="inl_rng_first"):
        indexcache.loads(indexcache.dumps(ix))


def test_the_cache_is_written_whole(tmp_path: Path):
    path = tmp_path / "sub" / "x.idx"
    indexcache.store(path, make_index())
    assert indexcache.load(path) is not None and [p.name for p in path.parent.iterdir()] == ["x.idx"]


def test_the_cache_keeps_the_ranges_an_entry_was_read_from():
    reads = [(".debug_info", 0, 100), (".debug_str", 0, -1)]
    back, got, digest = indexcache.loads_with_reads(indexcache.dumps(make_index(), reads, "ab" * 32))
    assert got == reads and digest == "ab" * 32 and back.files == make_index().files


@pytest.mark.parametrize("spec, ok", [("vm_fault.c:186", ("vm_fault.c", 186)), ("a:b:3", ("a:b", 3)),
                                      ("vm_fault.c", None), ("vm_fault.c:0", None), (":3", None), ("x:-1", None)])
def test_file_line_specs(spec, ok):
    if ok is None:
        with pytest.raises(UserError, match="expected FILE:LINE"):
            parse_spec(spec)
    else:
        assert parse_spec(spec) == ok


class _Image:
    """Just enough of a KernelImage for ``debuginfo.debuglink``."""

    def __init__(self, section: bytes):
        self.section = section

    def section_data(self, name: str):
        return self.section if name == ".gnu_debuglink" else None


def test_debuglink_section_and_crc(tmp_path: Path):
    crc = 0xDEADBEEF
    assert debuginfo.debuglink(_Image(b"kernel.debug\0\0\0\0" + crc.to_bytes(4, "little"))) == ("kernel.debug", crc)
    assert debuginfo.debuglink(_Image(b"ab\0\0" + crc.to_bytes(4, "little"))) == ("ab", crc)
    assert debuginfo.debuglink(_Image(b"kernel.debug\0")) is None  # no room for the CRC
    assert debuginfo.debuglink(_Image(b"")) is None
    f = tmp_path / "x.debug"
    f.write_bytes(bytes(range(256)) * 5000)
    assert debuginfo.file_crc32(str(f)) == zlib.crc32(f.read_bytes())


def test_build_id_path():
    assert debuginfo.build_id_path("/usr/lib/debug", "93ac61ec") == "/usr/lib/debug/.build-id/93/ac61ec.debug"


def test_d_strings_cannot_break_out():
    assert d_string('a "b" \\c') == '"a \\"b\\" \\\\c"'
    assert d_string("tab\there\n") == '"tab?here?"'
    assert d_string("é") == '"?"'
