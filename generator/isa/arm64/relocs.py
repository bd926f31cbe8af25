"""AArch64 relocation types, for the image reader's ET_REL layout (ELF for the Arm 64-bit Architecture, "AAELF64").

FreeBSD links arm64 modules into ET_DYN files, whose text is final; an
ET_REL object (``ld -r`` output, a compiler's ``.o``) still has its branch
and address fields to fill.  The types are data, ``relocs.txt`` beside
this file: the branch relocations and the 64-bit data words are applied
(into the immediate layouts of ``tables.IMM_LAYOUTS``: ``dbp.isa_parts``), so
that a branch's target in a report is the linked one; the rest (page
addresses, low-12-bit offsets, GOT and TLS forms) are listed with the
width of the word they change, so a table masks them and never takes their
bytes as final.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Tuple

from ..contract import reloc_table
from ..immediates import FieldWriter

TABLE = reloc_table(Path(__file__).with_name("relocs.txt"))
reloc_type = TABLE.reloc_type
WRITERS: Mapping[str, FieldWriter] = {}  # every applied field is one immediate layout


def branch_field(length: int) -> Optional[Tuple[int, int]]:
    """Where a relocation naming a branch's target lies in the instruction, and what its addend
    lacks of the target's offset from the symbol: the whole word, nothing (target = S + A)."""
    return (0, 0)
