"""GNU objdump's instruction lines, as the fixed-width ISAs' oracles read them.

``objdump -dr`` prints an instruction as ``ADDR:\tWORD\tMNEMONIC\tOPERANDS``
followed by tab-separated inline relocation lines and a comment whose
marker is the ISA's own (arm64 ``//``, riscv ``#``); the words are the same
for both, only the marker differs.
"""

from __future__ import annotations

import re
from typing import Tuple

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
