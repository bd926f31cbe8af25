"""AArch64 relocation types, for the image reader's ET_REL layout (ELF for the Arm 64-bit Architecture, "AAELF64").

FreeBSD links arm64 modules into ET_DYN files, whose text is final; an
ET_REL object (``ld -r`` output, a compiler's ``.o``) still has its branch
and address fields to fill.  The branch relocations and the 64-bit data
words are applied (``insert``), so that a branch's target in a report is
the linked one; the rest (page addresses, low-12-bit offsets, GOT and TLS
forms) are listed with the width of the word they change, so a table masks
them and never takes their bytes as final.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ..contract import reloc_types

R_AARCH64_NONE = 0

# type -> (name, field bytes, pc-relative, (bit position, width) of the
# word's immediate that holds S + A - P >> 2), for the types inserted here.
_BRANCHES: Dict[int, Tuple[str, Tuple[int, int]]] = {
    279: ("R_AARCH64_TSTBR14", (5, 14)),
    280: ("R_AARCH64_CONDBR19", (5, 19)),
    282: ("R_AARCH64_JUMP26", (0, 26)),
    283: ("R_AARCH64_CALL26", (0, 26)),
}
_DATA = {257: ("R_AARCH64_ABS64", 8, False), 258: ("R_AARCH64_ABS32", 4, False), 260: ("R_AARCH64_PREL64", 8, True),
         261: ("R_AARCH64_PREL32", 4, True)}
# Known but not applied: instruction fields (4 bytes) and narrow data.
_UNAPPLIED = {
    259: ("R_AARCH64_ABS16", 2), 262: ("R_AARCH64_PREL16", 2), 273: ("R_AARCH64_LD_PREL_LO19", 4),
    274: ("R_AARCH64_ADR_PREL_LO21", 4), 275: ("R_AARCH64_ADR_PREL_PG_HI21", 4),
    276: ("R_AARCH64_ADR_PREL_PG_HI21_NC", 4), 277: ("R_AARCH64_ADD_ABS_LO12_NC", 4),
    278: ("R_AARCH64_LDST8_ABS_LO12_NC", 4), 284: ("R_AARCH64_LDST16_ABS_LO12_NC", 4),
    285: ("R_AARCH64_LDST32_ABS_LO12_NC", 4), 286: ("R_AARCH64_LDST64_ABS_LO12_NC", 4),
    299: ("R_AARCH64_LDST128_ABS_LO12_NC", 4), 311: ("R_AARCH64_ADR_GOT_PAGE", 4),
    312: ("R_AARCH64_LD64_GOT_LO12_NC", 4), 264: ("R_AARCH64_MOVW_UABS_G0", 4), 265: ("R_AARCH64_MOVW_UABS_G0_NC", 4),
    266: ("R_AARCH64_MOVW_UABS_G1", 4), 267: ("R_AARCH64_MOVW_UABS_G1_NC", 4), 268: ("R_AARCH64_MOVW_UABS_G2", 4),
    269: ("R_AARCH64_MOVW_UABS_G2_NC", 4), 270: ("R_AARCH64_MOVW_UABS_G3", 4),
    541: ("R_AARCH64_TLSIE_ADR_GOTTPREL_PAGE21", 4), 542: ("R_AARCH64_TLSIE_LD64_GOTTPREL_LO12_NC", 4),
    549: ("R_AARCH64_TLSLE_ADD_TPREL_HI12", 4), 551: ("R_AARCH64_TLSLE_ADD_TPREL_LO12_NC", 4),
    # What a -Bshareable module (FreeBSD's ET_DYN .ko) leaves for the kernel linker at load.
    1025: ("R_AARCH64_GLOB_DAT", 8), 1026: ("R_AARCH64_JUMP_SLOT", 8), 1027: ("R_AARCH64_RELATIVE", 8),
}

# A branch's field is its instruction word, its value PC-relative.
reloc_type = reloc_types("R_AARCH64_", frozenset({R_AARCH64_NONE}),
                         {**_DATA, **{t: (name, 4, True) for t, (name, _) in _BRANCHES.items()}}, _UNAPPLIED)
_FIELD = {name: field for name, field in _BRANCHES.values()}


def insert(name: str, field: bytes, value: int) -> Optional[bytes]:
    """The instruction word ``field`` with a branch relocation's ``value`` (S + A - P) put in its
    immediate; None for a type that is a plain little-endian store."""
    where = _FIELD.get(name)
    if where is None:
        return None
    shift, bits = where
    mask = ((1 << bits) - 1) << shift
    w = int.from_bytes(field, "little")
    w = (w & ~mask) | ((value >> 2) << shift & mask)
    return w.to_bytes(4, "little")


def branch_field(length: int) -> Optional[Tuple[int, int]]:
    """Where a relocation naming a branch's target lies in the instruction, and what its addend
    lacks of the target's offset from the symbol: the whole word, nothing (target = S + A)."""
    return (0, 0)
