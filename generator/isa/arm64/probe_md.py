"""arm64's probe metadata: kinst's ``struct kinst_probe_md`` and the table kinds.

kinst keeps one field per probe, the instruction's class (``enum
kinst_instr``: ADR, B, BCOND, BL, CBZ, TBZ, LDR_LITERAL, LDX, STX, COMMON)
and, before D56988, ``emulate``.  Its emulation then re-reads the fields of
the saved word.  ``ProbeMd`` holds the class, the word and those fields,
decoded once, so that a report shows what an emulation will use.

The table kinds say how a hit resumes: ``trampoline`` (the word, then the
trampoline's own breakpoint), or the emulation of one PC-relative or
register-branch class.  One owner: ``kinds.txt``, which ``TABLE_KINDS``
reads and the generated ``kinst_encoding.h`` is rendered from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, NamedTuple

from ..dbp import NO_DISPOFF, md_json
from ..contract import FlagBit, load_kinds

TABLE_KINDS = load_kinds(Path(__file__).with_name("kinds.txt"))

# struct kinst_md's km_flags (the core's C has them from kinst_encoding.h).
FLAG_NONZERO, FLAG_LINK, FLAG_SIGNED = 0x01, 0x02, 0x04
FLAG_BITS = (
    FlagBit("KINST_MD_NONZERO", FLAG_NONZERO, "cbnz, tbnz"),
    FlagBit("KINST_MD_LINK", FLAG_LINK, "bl, blr: x30 gets the return address"),
    FlagBit("KINST_MD_SIGNED", FLAG_SIGNED, "ldrsw"),
)


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
