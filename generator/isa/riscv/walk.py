"""riscv's host walk (``accel/kk_walk.c``) as data: what ``isa/hostcore.py`` builds it from and hands it.

The rule for one instruction is the portable core's
(``sys/modules/kinst/riscv/kinst_core.c``, ``kinst_core_dissect()``), whose
refusals are ``tables.CORE_REFUSALS``: their reasons are the reason codes.
kinst's name for an instruction's emulation (``ProbeMd.type``) follows from
the kind the core found and, for the compressed branch and register jump,
the condition and the link register.
"""

from __future__ import annotations

from typing import Any, Dict

from . import probe_md as M
from . import tables as T
from ..dbp import accelerator

# kinst's emulation type of each table kind (index: Isa.table_kinds); a compressed branch or register jump is
# named by its km_funct3 (c.beqz 0, c.bnez 1) or km_rd (c.jr 0, c.jalr 1).
_TYPES = {"trampoline": "common", "jal": "jal", "jalr": "jalr", "branch": "branch", "auipc": "auipc", "c.j": "c.j",
          "c.branch": ("c.beqz", "c.bnez"), "c.jr": ("c.jr", "c.jalr")}
_BY_KIND = tuple(_TYPES[k.kind] for k in M.TABLE_KINDS)  # a kind missing here (or misspelt) fails at import
_FIELDS = ("km_kind", "km_instlen", "km_insn", "km_rd", "km_rs1", "km_rs2", "km_imm", "km_funct3")


def _md_record(row: Dict[str, Any]) -> M.ProbeMd:
    typ = _BY_KIND[row["km_kind"]]
    if isinstance(typ, tuple):
        typ = typ[row["km_funct3"] if row["km_funct3"] >= 0 else row["km_rd"]]
    return M.ProbeMd(typ, typ != "common", row["km_instlen"], row["km_insn"], row["km_rd"], row["km_rs1"],
                     row["km_rs2"], row["km_imm"], row["km_funct3"])


# capstone's mnemonics of each emulated kind.
MNEMONICS = {"jal": ("jal", "j"), "jalr": ("jalr", "jr", "ret"),
             "branch": ("beq", "bne", "blt", "bge", "bltu", "bgeu", "beqz", "bnez", "blez", "bgez", "bltz",
                        "bgtz", "bgt", "ble", "bgtu", "bleu"),
             "auipc": ("auipc",), "c.j": ("c.j",), "c.branch": ("c.beqz", "c.bnez"), "c.jr": ("c.jr", "c.jalr")}

ACCELERATOR = accelerator(__file__, T, M.TABLE_KINDS, MNEMONICS, reasons=tuple(r.reason for r in T.CORE_REFUSALS),
                          md_fields=_FIELDS,
                          md_record=_md_record,
                          signed_fields=frozenset({"km_imm", "km_rd", "km_rs1", "km_rs2", "km_funct3"}))
