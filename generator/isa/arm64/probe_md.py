"""arm64's probe metadata: kinst's ``struct kinst_probe_md`` and the table kinds.

kinst keeps one field per probe, the instruction's class (``enum
kinst_instr``: ADR, B, BCOND, BL, CBZ, TBZ, LDR_LITERAL, LDX, STX, COMMON)
and, before D56988, ``emulate``.  Its emulation then re-reads the fields of
the saved word.  ``ProbeMd`` holds the class, the word and those fields,
decoded once, so that a report shows what an emulation will use.

The table kinds say how a hit resumes: ``trampoline`` (the word, then the
trampoline's own breakpoint), or the emulation of one PC-relative or
register-branch class.  One owner: the generated ``kinst_encoding.h`` is
rendered from ``TABLE_KINDS``.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple

from ..dbp import NO_DISPOFF, md_json
from ..contract import FlagBit, TableKind

KIND_TRAMPOLINE = "trampoline"
KIND_B = "b"
KIND_BL = "bl"
KIND_BCOND = "b.cond"
KIND_CBZ = "cbz"
KIND_TBZ = "tbz"
KIND_ADR = "adr"
KIND_ADRP = "adrp"
KIND_LDR_LITERAL = "ldr-literal"
KIND_BR_REG = "br-reg"

TABLE_KINDS = (
    TableKind(KIND_TRAMPOLINE, "KINST_K_TRAMPOLINE", "copied, then the trampoline's own breakpoint"),
    TableKind(KIND_B, "KINST_K_B", "b: emulated"),
    TableKind(KIND_BL, "KINST_K_BL", "bl: emulated, x30 set"),
    TableKind(KIND_BCOND, "KINST_K_BCOND", "b.cond: emulated on the NZCV flags"),
    TableKind(KIND_CBZ, "KINST_K_CBZ", "cbz, cbnz: emulated"),
    TableKind(KIND_TBZ, "KINST_K_TBZ", "tbz, tbnz: emulated"),
    TableKind(KIND_ADR, "KINST_K_ADR", "adr: emulated"),
    TableKind(KIND_ADRP, "KINST_K_ADRP", "adrp: emulated"),
    TableKind(KIND_LDR_LITERAL, "KINST_K_LDR_LITERAL", "ldr, ldrsw, prfm (literal): emulated"),
    TableKind(KIND_BR_REG, "KINST_K_BR_REG", "br, blr, ret: emulated"),
)
# struct kinst_md's km_flags (the core's C has them from kinst_encoding.h).
FLAG_NONZERO, FLAG_LINK, FLAG_SIGNED = 0x01, 0x02, 0x04
FLAG_BITS = (
    FlagBit("KINST_MD_NONZERO", FLAG_NONZERO, "cbnz, tbnz"),
    FlagBit("KINST_MD_LINK", FLAG_LINK, "bl, blr: x30 gets the return address"),
    FlagBit("KINST_MD_SIGNED", FLAG_SIGNED, "ldrsw"),
)
CONDITIONAL_KINDS = (KIND_BCOND, KIND_CBZ, KIND_TBZ)


class ProbeMd(NamedTuple):
    """kinst's per-probe data for one word, with the fields its emulation decodes."""

    type: str  # enum kinst_instr, lower case: adr, b, bcond, bl, cbz, tbz, ldr_literal, ldx, stx, common
    emulate: bool  # kinst emulates it (kp_md.emulate; before kinst's own refusals)
    insn: int  # the instruction word (kp_savedval)
    instlen: int  # always 4
    reg: int  # Rt/Rd/Rn the emulation reads or writes; -1 none; 31 is xzr (sp for none of these)
    imm: int  # byte offset from the instruction (adrp: from its 4 KiB page), sign-extended
    cond: int  # b.cond: the condition, -1 otherwise
    bit: int  # tbz/tbnz: the bit tested, 0-63; -1 otherwise
    nonzero: bool  # cbnz, tbnz
    link: bool  # bl, blr: x30 gets the return address
    size: int  # ldr literal: bytes loaded (4 or 8; 0 for prfm)
    signed: bool  # ldrsw

    dispoff = NO_DISPOFF

    def to_json(self) -> Dict[str, Any]:
        return md_json(self, self.instlen)


def skip_md(length: int) -> ProbeMd:
    """The metadata of a refused word nobody will emulate or trampoline."""
    return ProbeMd("common", False, 0, length, -1, 0, -1, -1, False, False, 0, False)


def table_row(md: ProbeMd) -> Dict[str, object]:
    """The fields of the probe metadata, formatted for C."""
    return {"insn": f"{md.insn:#010x}", "reg": md.reg, "imm": md.imm, "cond": md.cond, "bit": md.bit,
            "nonzero": int(md.nonzero), "link": int(md.link), "size": md.size, "signed": int(md.signed)}
