"""RISC-V relocation types, for the image reader's ET_REL layout (RISC-V ELF psABI, "Relocations").

FreeBSD links riscv modules into ET_DYN files, whose text is final; an
ET_REL object still has its fields to fill, and the assembler leaves a
relocation on every branch, even a local one, even with -mno-relax.  The
branch relocations (B-, J-, CB- and CJ-type immediates), the auipc+jalr
call pair and the 32- and 64-bit data words are applied (``insert``), so
that a branch's target in a report is the linked one; the rest (hi20/lo12
address pairs, GOT, TLS, the ADD/SUB pairs of debug and unwind data) are
listed with the width of what they change, so a table masks them.
R_RISCV_RELAX fills nothing.  R_RISCV_ALIGN marks bytes a relaxing linker
may delete: a function holding one is not tabled (its layout may change at
link time).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

from ..contract import reloc_types

R_RISCV_NONE = 0
R_RISCV_RELAX = 51


def _sext(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def _b_type(w: int, v: int) -> int:
    return (w & 0x01FFF07F) | (v >> 12 & 1) << 31 | (v >> 5 & 0x3F) << 25 | (v >> 1 & 15) << 8 | (v >> 11 & 1) << 7


def _j_type(w: int, v: int) -> int:
    return (w & 0xFFF) | (v >> 20 & 1) << 31 | (v >> 1 & 0x3FF) << 21 | (v >> 11 & 1) << 20 | (v >> 12 & 0xFF) << 12


def _cb_type(h: int, v: int) -> int:
    return ((h & 0xE383) | (v >> 8 & 1) << 12 | (v >> 3 & 3) << 10 | (v >> 6 & 3) << 5 | (v >> 1 & 3) << 3
            | (v >> 5 & 1) << 2)


def _cj_type(h: int, v: int) -> int:
    return ((h & 0xE003) | (v >> 11 & 1) << 12 | (v >> 4 & 1) << 11 | (v >> 8 & 3) << 9 | (v >> 10 & 1) << 8
            | (v >> 6 & 1) << 7 | (v >> 7 & 1) << 6 | (v >> 1 & 7) << 3 | (v >> 5 & 1) << 2)


def _call(pair: int, v: int) -> int:
    """auipc (low word) + jalr (high word): hi20 with the rounding the lo12's sign needs."""
    hi = (v + 0x800) >> 12 & 0xFFFFF
    lo = v & 0xFFF
    auipc, jalr = pair & 0xFFFFFFFF, pair >> 32
    return (auipc & 0xFFF) | hi << 12 | ((jalr & 0xFFFFF) | lo << 20) << 32


# type -> (name, field bytes, pc-relative, how the value goes in) for the types applied.
_INSERTED: Dict[int, Tuple[str, int, Callable[[int, int], int]]] = {
    16: ("R_RISCV_BRANCH", 4, _b_type),
    17: ("R_RISCV_JAL", 4, _j_type),
    18: ("R_RISCV_CALL", 8, _call),
    19: ("R_RISCV_CALL_PLT", 8, _call),
    44: ("R_RISCV_RVC_BRANCH", 2, _cb_type),
    45: ("R_RISCV_RVC_JUMP", 2, _cj_type),
}
_DATA = {1: ("R_RISCV_32", 4, False), 2: ("R_RISCV_64", 8, False), 57: ("R_RISCV_32_PCREL", 4, True)}
# Known but not applied, with the width of what they change.
_UNAPPLIED = {
    20: ("R_RISCV_GOT_HI20", 4), 21: ("R_RISCV_TLS_GOT_HI20", 4), 22: ("R_RISCV_TLS_GD_HI20", 4),
    23: ("R_RISCV_PCREL_HI20", 4), 24: ("R_RISCV_PCREL_LO12_I", 4), 25: ("R_RISCV_PCREL_LO12_S", 4),
    26: ("R_RISCV_HI20", 4), 27: ("R_RISCV_LO12_I", 4), 28: ("R_RISCV_LO12_S", 4), 29: ("R_RISCV_TPREL_HI20", 4),
    30: ("R_RISCV_TPREL_LO12_I", 4), 31: ("R_RISCV_TPREL_LO12_S", 4), 32: ("R_RISCV_TPREL_ADD", 4),
    33: ("R_RISCV_ADD8", 1), 34: ("R_RISCV_ADD16", 2), 35: ("R_RISCV_ADD32", 4), 36: ("R_RISCV_ADD64", 8),
    37: ("R_RISCV_SUB8", 1), 38: ("R_RISCV_SUB16", 2), 39: ("R_RISCV_SUB32", 4), 40: ("R_RISCV_SUB64", 8),
    52: ("R_RISCV_SUB6", 1), 53: ("R_RISCV_SET6", 1), 54: ("R_RISCV_SET8", 1), 55: ("R_RISCV_SET16", 2),
    56: ("R_RISCV_SET32", 4), 60: ("R_RISCV_SET_ULEB128", 1), 61: ("R_RISCV_SUB_ULEB128", 1),
    # What a -Bshareable module (FreeBSD's ET_DYN .ko) leaves for the kernel linker at load.
    3: ("R_RISCV_RELATIVE", 8), 5: ("R_RISCV_JUMP_SLOT", 8),
}

reloc_type = reloc_types("R_RISCV_", frozenset({R_RISCV_NONE, R_RISCV_RELAX}),
                         {**_DATA, **{t: (name, width, True) for t, (name, width, _) in _INSERTED.items()}},
                         {**_UNAPPLIED, 43: ("R_RISCV_ALIGN", 0)})  # width 0: the function is not tabled
_INSERT = {name: (width, fn) for name, width, fn in _INSERTED.values()}


def insert(name: str, field: bytes, value: int) -> Optional[bytes]:
    """``field`` with ``value`` (S + A - P) put into its immediate(s); None for a plain little-endian store."""
    how = _INSERT.get(name)
    if how is None:
        return None
    width, fn = how
    return fn(int.from_bytes(field, "little"), value).to_bytes(width, "little")


def branch_field(length: int) -> Optional[Tuple[int, int]]:
    """A branch relocation covers the whole instruction, and its target is S + A."""
    return (0, 0)
