"""The immediate fields of arm64 and riscv: one layout, read by the core's C and written by Python.

Each ISA's ``IMM_LAYOUTS`` (``generator/isa/<arch>/tables.py``) is the one
fact.  The relocation code writes a value into an instruction through
``immediates.insert`` (Python, over the data); the portable core reads it
back through ``kinst_core_imm()`` over ``KINST_IMM_LAYOUTS``, rendered from
the same data into ``kinst_encoding.h`` and compiled (the host build of the
core, ``isa/hostcore.py``).  The two sides share only that data, which is
the point: a slip in the renderer, the template, the C reader or the Python
writer breaks the round trip over random values and random other bits.
"""

from __future__ import annotations

import ctypes
import random
from pathlib import Path

import pytest

from generator.isa import by_name, hostcore, immediates
from generator.isa.contract import reloc_table

ARCHES = ("arm64", "riscv")
ROUNDS = 2000


@pytest.fixture(scope="module", params=ARCHES)
def isa_and_imm(request):
    """The ISA and its compiled ``kinst_core_imm(word, kind)``."""
    isa = by_name(request.param)
    fn = hostcore.host(isa.name).lib.kinst_core_imm
    fn.argtypes, fn.restype = (ctypes.c_uint32, ctypes.c_int), ctypes.c_int64
    return isa, fn


def _values(lay: immediates.ImmLayout, rnd: random.Random):
    """Byte offsets the field can hold: the extremes, zero and random ones, with the bits no piece holds 0."""
    held = sum(((1 << p.width) - 1) << p.imm for p in lay.pieces)
    top = 1 << (lay.bits - 1)
    for units in (-top, top - 1, 0, -1 & held, *(rnd.randrange(-top, top) for _ in range(ROUNDS))):
        units &= held
        yield (units - (1 << lay.bits) if units & top else units) * lay.scale


def test_c_reads_what_python_writes(isa_and_imm):
    isa, c_imm = isa_and_imm
    rnd = random.Random(21)
    assert isa.imm_layouts, f"{isa.name} has no immediate layouts"
    for lay in isa.imm_layouts:
        width = 16 if max(p.insn + p.width for p in lay.pieces) <= 16 else 32
        for kind in lay.kinds:
            k = isa.kind_index(kind)
            for value in _values(lay, rnd):
                word = immediates.insert(lay, rnd.getrandbits(width), value)
                assert 0 <= word < 1 << width
                assert c_imm(word, k) == value, f"{isa.name} {lay.name} ({kind}): {value:#x} in {word:#010x}"


def test_insert_keeps_the_other_bits(isa_and_imm):
    isa, _ = isa_and_imm
    for lay in isa.imm_layouts:
        field = sum(((1 << p.width) - 1) << p.insn for p in lay.pieces)
        assert immediates.insert(lay, 0xFFFFFFFF, 0) == 0xFFFFFFFF & ~field
        assert immediates.insert(lay, 0, -lay.scale) == field  # -1 unit: every held bit set


def test_kinds_without_a_field_read_zero(isa_and_imm):
    isa, c_imm = isa_and_imm
    with_field = {k for lay in isa.imm_layouts for k in lay.kinds}
    for i, kind in enumerate(isa.table_kinds):
        if kind.kind not in with_field:
            assert c_imm(0xFFFFFFFF, i) == 0, kind.kind


def test_a_layout_must_fill_its_bits():
    with pytest.raises(ValueError, match="does not fill"):
        immediates.layout("bad", ("31:12", "19:0|20"), doc="one bit too many")
    with pytest.raises(ValueError, match="held twice"):
        immediates.layout("bad", ("31:20", "11:0"), ("19:12", "7:0"), doc="bits 7:0 twice")
    with pytest.raises(ValueError, match="power of two"):
        immediates.layout("bad", ("25:0", "25:0"), scale=3, doc="a scale the core cannot multiply back")
    with pytest.raises(ValueError, match="wider than 31"):
        immediates.layout("bad", ("31:0", "31:0"), doc="a run kinst_core_imm() cannot mask")


def test_a_malformed_relocation_row_names_its_line(tmp_path: Path):
    bad = tmp_path / "relocs.txt"
    bad.write_text("# a comment\n1\tR_X_1\t4\tsideways\t-\n")
    with pytest.raises(ValueError, match=r"relocs.txt:2: "):
        reloc_table(bad)


def test_an_isa_without_immediate_fields_renders_none(tmp_path: Path):
    """amd64 has no immediate layouts: its kinst_encoding.h carries no KINST_IMM_* (its core reads none)."""
    amd64 = by_name("amd64")
    assert amd64.imm_layouts == ()
    text = hostcore.render_encoding(amd64, tmp_path).read_text()
    assert "KINST_IMM_" not in text
    assert "KINST_IMM_LAYOUTS" in hostcore.render_encoding(by_name("riscv"), tmp_path).read_text()


def test_a_layout_naming_a_kind_the_isa_lacks_stops_the_import():
    kinds = by_name("riscv").table_kinds
    jal = immediates.layout("j", ("31:12", "20|10:1|11|19:12"), kinds=("jal",), doc="J-type")
    assert immediates.for_kinds(kinds, jal) == (jal,)
    with pytest.raises(ValueError, match="c.jal"):
        immediates.for_kinds(kinds, jal._replace(kinds=("c.jal",)))
    with pytest.raises(ValueError, match="twice: jal"):
        immediates.for_kinds(kinds, jal, jal._replace(name="j2"))
