"""GNU objdump's instruction lines, as the fixed-width ISAs' oracles read them.

``objdump -dr`` prints an instruction as ``ADDR:\tWORD\tMNEMONIC\tOPERANDS``
followed by tab-separated inline relocation lines and a comment whose
marker is the ISA's own (arm64 ``//``, riscv ``#``); the words are the same
for both, only the marker differs.  ``Syntax`` holds what differs (the
marker, the direct branches' mnemonics, how a target is printed) and reads
a line the one way.
"""

from __future__ import annotations

import re
from typing import FrozenSet, NamedTuple, Optional, Pattern, Tuple

_RELOC = re.compile(r"^[0-9a-f]+: R_")


def insn_text(rest: str, comment: str) -> Tuple[str, str]:
    """objdump's text after "ADDR:\\t": ("mnemonic operands", inline relocations); ``comment`` starts the
    comment objdump appends to an operand ("64 <f+0x64>  // b.none")."""
    parts = rest.split("\t")
    words = [parts[0].strip()]
    relocs = []
    for p in parts[1:]:
        if _RELOC.match(p):
            relocs.append(p)
        elif relocs:
            relocs[-1] += "\t" + p  # the relocation's symbol
        else:
            words.append(p.split(comment, 1)[0].strip())
    return " ".join(w for w in words if w), " ".join(relocs)


class Syntax(NamedTuple):
    """How one fixed-width ISA's objdump writes its instructions (``OracleQuirks``' readers of them)."""

    comment: str  # what starts the comment objdump appends to an operand ("//", " #")
    direct_branches: FrozenSet[str]  # the mnemonics of direct branches
    branch_families: Tuple[str, ...]  # and the prefixes of whole families of them ("b." for b.eq, b.ne, ...)
    target: Pattern[str]  # a direct branch's last operand: its target in hex (group 1), then "<symbol+offset>"

    def is_branch(self, mnem: str) -> bool:
        """Whether objdump's mnemonic ``mnem`` is a direct branch."""
        return mnem in self.direct_branches or mnem.startswith(self.branch_families)

    def insn_text(self, rest: str) -> Tuple[str, str]:
        """objdump's text after "ADDR:\\t": ("mnemonic operands", inline relocations)."""
        return insn_text(rest, self.comment)

    def branch_target(self, text: str) -> Optional[int]:
        """The target objdump prints for a direct branch; None for any other instruction."""
        mnem, _, ops = text.partition(" ")
        if not self.is_branch(mnem):
            return None
        m = self.target.search(ops.strip())
        return int(m.group(1), 16) if m else None
