"""riscv's probe metadata: kinst's ``struct kinst_probe_md`` and the table kinds.

kinst keeps ``instlen`` (2 or 4) and ``emulate`` per probe, and its
emulation re-decodes the saved value.  ``ProbeMd`` holds those two, the
emulation type and the fields it decodes, once, so that a report shows
what an emulation will use.  One owner for the kinds: the generated
``kinst_encoding.h`` is rendered from ``TABLE_KINDS``.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple

from ..dbp import NO_DISPOFF, md_json
from ..contract import TableKind

KIND_TRAMPOLINE = "trampoline"
KIND_JAL = "jal"
KIND_JALR = "jalr"
KIND_BRANCH = "branch"
KIND_AUIPC = "auipc"
KIND_C_J = "c.j"
KIND_C_BRANCH = "c.branch"
KIND_C_JR = "c.jr"

TABLE_KINDS = (
    TableKind(KIND_TRAMPOLINE, "KINST_K_TRAMPOLINE", "copied, then the trampoline's own ebreak"),
    TableKind(KIND_JAL, "KINST_K_JAL", "jal: emulated"),
    TableKind(KIND_JALR, "KINST_K_JALR", "jalr: emulated"),
    TableKind(KIND_BRANCH, "KINST_K_BRANCH", "beq, bne, blt, bge, bltu, bgeu: emulated"),
    TableKind(KIND_AUIPC, "KINST_K_AUIPC", "auipc: emulated"),
    TableKind(KIND_C_J, "KINST_K_C_J", "c.j: emulated"),
    TableKind(KIND_C_BRANCH, "KINST_K_C_BRANCH", "c.beqz, c.bnez: emulated"),
    TableKind(KIND_C_JR, "KINST_K_C_JR", "c.jr, c.jalr: emulated"),
)
CONDITIONAL_KINDS = (KIND_BRANCH, KIND_C_BRANCH)


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
