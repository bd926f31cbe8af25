"""arm64 decode: the instruction walk over a function's words, with capstone as the decoder of record.

Every A64 instruction is one little-endian 32-bit word, and kinst walks a
function word by word from its symbol (``kinst_make_probe()``).  capstone
names each word; a word it cannot decode becomes one ``(bad)`` entry of four
bytes, which ``classify`` refuses, and the walk goes on at the next word.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import capstone

from ..contract import BAD, Insn

INSN_SIZE = 4

_md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)


def decode(code: bytes, address: int, limit: Optional[int] = None) -> Tuple[List[Insn], str]:
    """Walk ``code`` word by word up to ``limit``; return instructions and a walk error.

    The walk error is "" when the words end exactly at ``limit``; a symbol
    that does not start on a word boundary, or whose size is not a whole
    number of words, is reported (kinst would read its words misaligned).
    """
    if limit is None:
        limit = len(code)
    out: List[Insn] = []
    off = 0
    # A last partial word is decoded whole when the section holds it: the
    # analysis then refuses it as extending past the symbol.
    end = min(-(-limit // INSN_SIZE) * INSN_SIZE, len(code) - len(code) % INSN_SIZE)
    while off < end:
        start = off
        for _, size, mnem, ops in _md.disasm_lite(code[off:end], address + off):
            out.append(Insn(off, size, mnem, ops))
            off += size
        if off == start:
            out.append(Insn(off, INSN_SIZE, BAD, ""))
            off += INSN_SIZE
    err = ""
    if address % INSN_SIZE:
        err = f"symbol at {address:#x} is not word-aligned; the words kinst would read are not instructions"
    elif limit % INSN_SIZE:
        err = f"symbol size {limit} is not a multiple of 4; the last {limit % INSN_SIZE} bytes are not an instruction"
    return out, err
