"""How GNU objdump and QEMU see arm64 code: the quirks the decoder and hit-count proofs allow for.

- ``aarch64-linux-gnu-objdump`` (Debian's binutils-aarch64-linux-gnu)
  separates mnemonic, operands, comments (``// #0``) and inline relocations
  with tabs, and prints a direct branch's target as the last operand, in hex,
  followed by ``<symbol+offset>``: ``cbz x0, 9c <h+0xc>``, ``tbz w0, #20, 2c
  <f+0x2c>``.
- A branch relocation's field is the whole word and its target is S + A.
- No instruction repeats in place the way x86's rep prefixes do.
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

from .probe_md import CONDITIONAL_KINDS
from ..contract import OracleQuirks

DIRECT_BRANCHES = frozenset({"b", "bl", "cbz", "cbnz", "tbz", "tbnz"})
_RELOC = re.compile(r"^[0-9a-f]+: R_")
_TARGET = re.compile(r"(?:^|[ ,#])([0-9a-f]+)(?: <[^>]*>)?$")


def insn_text(rest: str) -> Tuple[str, str]:
    """objdump's text after "ADDR:\\t": ("mnemonic operands", inline relocations)."""
    parts = rest.split("\t")
    words = [parts[0].strip()]
    relocs = []
    for p in parts[1:]:
        if _RELOC.match(p):
            relocs.append(p)
        elif relocs:
            relocs[-1] += "\t" + p  # the relocation's symbol
        else:
            words.append(p.split("//", 1)[0].strip())  # "64 <f+0x64>  // b.none"
    return " ".join(w for w in words if w), " ".join(relocs)


def branch_target(text: str) -> Optional[int]:
    """The target objdump prints for a direct branch (b, bl, b.cond, cbz/cbnz, tbz/tbnz); None otherwise."""
    mnem, _, ops = text.partition(" ")
    if mnem not in DIRECT_BRANCHES and not mnem.startswith(("b.", "bc.")):
        return None
    m = _TARGET.search(ops.strip())
    return int(m.group(1), 16) if m else None


QUIRKS = OracleQuirks(
    objdump="aarch64-linux-gnu-objdump",
    branch_mnemonic=lambda m: m in DIRECT_BRANCHES or m.startswith(("b.", "bc.")),
    pcrel32_relocs=("R_AARCH64_CALL26", "R_AARCH64_JUMP26", "R_AARCH64_CONDBR19", "R_AARCH64_TSTBR14"),
    conditional_kinds=CONDITIONAL_KINDS,
    insn_text=insn_text,
    branch_target=branch_target,
    reloc_target_bias=0,
    qemu="qemu-aarch64",
    cross_packages="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static",
    gnu_triple="aarch64-linux-gnu",
    debian_arch="arm64",
)
