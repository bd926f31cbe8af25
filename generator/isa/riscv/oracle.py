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
from typing import Optional, Tuple

from ..contract import OracleQuirks
from .probe_md import CONDITIONAL_KINDS

DIRECT_BRANCHES = frozenset({"j", "jal", "beq", "bne", "blt", "bge", "bltu", "bgeu", "beqz", "bnez", "blez", "bgez",
                             "bltz", "bgtz", "bgt", "ble", "bgtu", "bleu"})
_RELOC = re.compile(r"^[0-9a-f]+: R_")
_TARGET = re.compile(r"(?:^|,)([0-9a-f]+)(?: <[^>]*>)?$")


def insn_text(rest: str) -> Tuple[str, str]:
    """objdump's text after "ADDR:\\t": ("mnemonic operands", inline relocations)."""
    parts = rest.split("\t")
    words = [parts[0].strip()]
    relocs = []
    for p in parts[1:]:
        if _RELOC.match(p):
            relocs.append(p)
        elif relocs:
            relocs[-1] += "\t" + p
        else:
            words.append(p.split(" #", 1)[0].strip())
    return " ".join(w for w in words if w), " ".join(relocs)


def branch_target(text: str) -> Optional[int]:
    """The target objdump prints for a direct branch (jal, j, the conditional branches); None otherwise."""
    mnem, _, ops = text.partition(" ")
    if mnem not in DIRECT_BRANCHES:
        return None
    m = _TARGET.search(ops.strip())
    return int(m.group(1), 16) if m else None


QUIRKS = OracleQuirks(
    objdump="riscv64-linux-gnu-objdump",
    branch_mnemonic=lambda m: m in DIRECT_BRANCHES,
    pcrel32_relocs=("R_RISCV_BRANCH", "R_RISCV_JAL", "R_RISCV_RVC_BRANCH", "R_RISCV_RVC_JUMP"),
    conditional_kinds=CONDITIONAL_KINDS,
    insn_text=insn_text,
    branch_target=branch_target,
    reloc_target_bias=0,
    qemu="qemu-riscv64",
    cross_packages="gcc-riscv64-linux-gnu libc6-dev-riscv64-cross qemu-user-static",
    gnu_triple="riscv64-linux-gnu",
    debian_arch="riscv64",
)
