"""x86-64 relocation types, for the image reader's ET_REL layout (System V x86-64 psABI, table 4.9)."""

from __future__ import annotations

from typing import Optional, Tuple

from ..contract import reloc_types

R_X86_64_NONE = 0

_APPLIED = {
    1: ("R_X86_64_64", 8, False),
    2: ("R_X86_64_PC32", 4, True),
    4: ("R_X86_64_PLT32", 4, True),
    10: ("R_X86_64_32", 4, False),
    11: ("R_X86_64_32S", 4, False),
    24: ("R_X86_64_PC64", 8, True),
}
# Types not applied (GOT, TLS, narrow fields), with the width of the field
# they fill.  They are still listed, as unresolved, so that a field they fill
# is never read as its final value, and masked where a table compares bytes.
_UNAPPLIED = {
    3: ("R_X86_64_GOT32", 4), 9: ("R_X86_64_GOTPCREL", 4), 12: ("R_X86_64_16", 2), 13: ("R_X86_64_PC16", 2),
    14: ("R_X86_64_8", 1), 15: ("R_X86_64_PC8", 1), 19: ("R_X86_64_TLSGD", 4), 20: ("R_X86_64_TLSLD", 4),
    21: ("R_X86_64_DTPOFF32", 4), 22: ("R_X86_64_GOTTPOFF", 4), 23: ("R_X86_64_TPOFF32", 4),
    26: ("R_X86_64_GOTPC32", 4), 41: ("R_X86_64_GOTPCRELX", 4), 42: ("R_X86_64_REX_GOTPCRELX", 4),
}

reloc_type = reloc_types("R_X86_64_", frozenset({R_X86_64_NONE}), _APPLIED, _UNAPPLIED)


def branch_field(length: int) -> Optional[Tuple[int, int]]:
    """A direct branch's rel32 is its last four bytes, and its target is S + A + 4 (the rel32 counts from
    the end of the instruction); instructions shorter than 5 bytes hold no rel32."""
    return (length - 4, 4) if length >= 5 else None
