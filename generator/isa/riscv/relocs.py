"""RISC-V relocation types, for the image reader's ET_REL layout (RISC-V ELF psABI, "Relocations").

FreeBSD links riscv modules into ET_DYN files, whose text is final; an
ET_REL object still has its fields to fill, and the assembler leaves a
relocation on every branch, even a local one, even with -mno-relax.  The
types are data, ``relocs.txt`` beside this file: the branch relocations
(into the B-, J-, CB- and CJ-type layouts of ``tables.IMM_LAYOUTS``), the
auipc+jalr call pair (``WRITERS``) and the 32- and 64-bit data words are
applied (``dbp.isa_parts``), so that a branch's target in a report is the linked one; the
rest (hi20/lo12 address pairs, GOT, TLS, the ADD/SUB pairs of debug and
unwind data) are listed with the width of what they change, so a table
masks them.  R_RISCV_RELAX fills nothing.  R_RISCV_ALIGN marks bytes a
relaxing linker may delete: a function holding one is not tabled (its
layout may change at link time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Tuple

from ..contract import reloc_table
from ..immediates import FieldWriter
from ..immediates import insert as insert_imm
from .tables import IMM_LAYOUTS

_LAYOUT = {lay.name: lay for lay in IMM_LAYOUTS}


def _call(pair: int, v: int) -> int:
    """auipc (low word) + jalr (high word): hi20 with the rounding the lo12's sign needs."""
    auipc = insert_imm(_LAYOUT["u"], pair & 0xFFFFFFFF, v + 0x800)
    jalr = insert_imm(_LAYOUT["i"], pair >> 32, v)
    return auipc | jalr << 32


TABLE = reloc_table(Path(__file__).with_name("relocs.txt"))
reloc_type = TABLE.reloc_type
WRITERS: Mapping[str, FieldWriter] = {"call": _call}  # relocs.txt's field "call"


def branch_field(length: int) -> Optional[Tuple[int, int]]:
    """A branch relocation covers the whole instruction, and its target is S + A."""
    return (0, 0)
