"""riscv decode: the instruction walk over a function's bytes, with capstone as the decoder of record.

RV64GC instructions are 2 bytes (compressed, low bits not 11) or 4 bytes,
and kinst walks a function with ``dtrace_instr_size()``.  capstone (RISCV64
with the C extension) names each instruction; bytes it cannot decode
become one ``(bad)`` entry sized by the standard length encoding (low two
bits, then low five bits), so the walk stays on real boundaries, or of 2
bytes with an empty operand when the encoding says 6 bytes or more (no
RV64GC instruction is), after which ``context_refusals`` refuses the rest.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import capstone

from ..contract import BAD, Insn

SIZED = "length from the encoding"  # operands text of a (bad) entry whose length is known

_md = capstone.Cs(capstone.CS_ARCH_RISCV, capstone.CS_MODE_RISCV64 | capstone.CS_MODE_RISCVC)


def encoded_length(low: int) -> int:
    """The length the low halfword announces: 2, 4, or 0 for 6 bytes and more."""
    if low & 3 != 3:
        return 2
    if low & 0x1F != 0x1F:
        return 4
    return 0


def decode(code: bytes, address: int, limit: Optional[int] = None) -> Tuple[List[Insn], str]:
    """Walk ``code`` from its start up to ``limit``; return instructions and a walk error."""
    if limit is None:
        limit = len(code)
    out: List[Insn] = []
    off = 0
    while off < limit:
        start = off
        for _, size, mnem, ops in _md.disasm_lite(code[off:] if off else code, address + off):
            out.append(Insn(off, size, mnem, ops))
            off += size
            if off >= limit:
                break
        if off == start:
            size = encoded_length(int.from_bytes(code[off : off + 2], "little")) if off + 2 <= len(code) else 0
            out.append(Insn(off, size or 2, BAD, SIZED if size else ""))
            off += size or 2
    err = ""
    if address % 2:
        err = f"symbol at {address:#x} is not 2-byte aligned: no instruction starts there"
    elif off != limit:
        err = f"decode walk ends at +{off}, past the symbol's end at +{limit}"
    return out, err
