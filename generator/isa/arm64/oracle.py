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

from .probe_md import TABLE_KINDS
from .. import dbp, objdump_text

SYNTAX = objdump_text.Syntax(
    comment="//",
    direct_branches=frozenset({"b", "bl", "cbz", "cbnz", "tbz", "tbnz"}),
    branch_families=("b.", "bc."),
    target=re.compile(r"(?:^|[ ,#])([0-9a-f]+)(?: <[^>]*>)?$"),
)

QUIRKS = dbp.oracle_quirks(
    SYNTAX, "aarch64-linux-gnu", debian_arch="arm64", conditional_kinds=TABLE_KINDS.names("b.cond", "cbz", "tbz"),
    pcrel32_relocs=("R_AARCH64_CALL26", "R_AARCH64_JUMP26", "R_AARCH64_CONDBR19", "R_AARCH64_TSTBR14"),
)
