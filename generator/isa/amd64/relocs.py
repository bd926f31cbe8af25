"""x86-64 relocation types, for the image reader's ET_REL layout (System V x86-64 psABI, table 4.9).

The types are data, ``relocs.txt`` beside this file: the applied ones
(absolute and PC-relative words) and the ones only listed (GOT, TLS, narrow
fields), so that a field they fill is never read as its final value, and
is masked where a table compares bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

from ..contract import reloc_table

reloc_type = reloc_table(Path(__file__).with_name("relocs.txt")).reloc_type


def branch_field(length: int) -> Optional[Tuple[int, int]]:
    """A direct branch's rel32 is its last four bytes, and its target is S + A + 4 (the rel32 counts from
    the end of the instruction); instructions shorter than 5 bytes hold no rel32."""
    return (length - 4, 4) if length >= 5 else None
