"""How GNU objdump and QEMU see riscv code: the quirks the decoder and hit-count proofs allow for.

- ``riscv64-linux-gnu-objdump`` (Debian's binutils-riscv64-linux-gnu)
  prints compressed instructions by their expanded aliases (``c.beqz a5,x``
  as ``beqz a5,x``), separates mnemonic, operands and inline relocations
  with tabs, puts comments after ``#`` (``jalr ra # 3c <f+0xc>``) and
  prints a direct branch's target as its last operand, in hex, followed by
  ``<symbol+offset>``: ``beq s4,s2,50 <.L2>``, ``j 30 <.L5>``.
- A branch relocation's field is the whole instruction and its target is
  S + A.
"""

from __future__ import annotations

import re

from .. import dbp, objdump_text
from .probe_md import TABLE_KINDS

SYNTAX = objdump_text.Syntax(
    comment=" #",
    direct_branches=frozenset({"j", "jal", "beq", "bne", "blt", "bge", "bltu", "bgeu", "beqz", "bnez", "blez",
                               "bgez", "bltz", "bgtz", "bgt", "ble", "bgtu", "bleu"}),
    branch_families=(),
    target=re.compile(r"(?:^|,)([0-9a-f]+)(?: <[^>]*>)?$"),
)

QUIRKS = dbp.oracle_quirks(
    SYNTAX, "riscv64-linux-gnu", debian_arch="riscv64", conditional_kinds=TABLE_KINDS.names("branch", "c.branch"),
    pcrel32_relocs=("R_RISCV_BRANCH", "R_RISCV_JAL", "R_RISCV_RVC_BRANCH", "R_RISCV_RVC_JUMP"),
)
