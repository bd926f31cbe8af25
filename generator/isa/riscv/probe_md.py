"""riscv's probe metadata: kinst's ``struct kinst_probe_md`` and the table kinds.

kinst keeps ``instlen`` (2 or 4) and ``emulate`` per probe, and its
emulation re-decodes the saved value.  ``ProbeMd`` holds those two, the
emulation type and the fields it decodes, once, so that a report shows
what an emulation will use.  One owner for the kinds: ``kinds.txt``, which
``TABLE_KINDS`` reads and the generated ``kinst_encoding.h`` is rendered
from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, NamedTuple

from ..dbp import NO_DISPOFF, md_json
from ..contract import load_kinds

TABLE_KINDS = load_kinds(Path(__file__).with_name("kinds.txt"))


class ProbeMd(NamedTuple):
    """kinst's per-probe data for one instruction, with the fields its emulation decodes."""

    type: str  # kinst's emulation: jal, jalr, branch, auipc, c.j, c.beqz, c.bnez, c.jr, c.jalr; common
    emulate: bool  # kp_md.emulate (kinst emulates it)
    instlen: int  # kp_md.instlen: 2 or 4
    insn: int  # the instruction (instlen bytes of kp_savedval)
    rd: int  # destination x-register, -1 none (jal/jalr/auipc: 0 is x0, no write)
    rs1: int  # source x-registers, -1 none; a compressed rs1' is mapped to x8-x15
    rs2: int
    imm: int  # sign-extended offset from the instruction (auipc: imm20 << 12; jalr: from rs1)
    funct3: int  # branch: the condition (beq 0, bne 1, blt 4, bge 5, bltu 6, bgeu 7); -1 otherwise

    dispoff = NO_DISPOFF

    def to_json(self) -> Dict[str, Any]:
        return md_json(self, self.instlen)


def skip_md(length: int) -> ProbeMd:
    """The metadata of a refused instruction nobody will emulate or trampoline."""
    return ProbeMd("common", False, length, 0, -1, -1, -1, 0, -1)


def table_row(md: ProbeMd) -> Dict[str, object]:
    """The fields of the probe metadata, formatted for C."""
    return {"insn": f"{md.insn:#x}", "instlen": md.instlen, "rd": md.rd, "rs1": md.rs1, "rs2": md.rs2,
            "imm": md.imm, "funct3": md.funct3}
