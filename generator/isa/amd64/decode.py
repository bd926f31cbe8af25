"""amd64 decode: the instruction walk over a function's bytes, with capstone as the decoder of record.

capstone decides instruction boundaries, mnemonics and operands, corrected
where it is wrong (ud0/ud1 take a ModR/M byte; capstone 5 decodes them as two
bytes).  Bytes capstone cannot decode become one ``(bad)`` entry, sized by
iced-x86 when iced knows the encoding, so the walk stays on real boundaries.
"""

from __future__ import annotations

import functools
from typing import List, Optional, Tuple

from . import tables as T
from ..contract import BAD, Insn

_LENGTH_FIX_MNEMONICS = frozenset(T.LENGTH_FIXES.values())
_MODRM_1 = T.MODRM_1

SIZED_BY_ICED = "length from iced-x86"  # operands text of a (bad) entry whose length is known


@functools.lru_cache(maxsize=None)
def _capstone():
    """The AT&T-syntax amd64 decoder, made on first use: ``probes --all --summary`` runs on the
    accelerator and reaches capstone only for the functions it declines, so most runs skip its import."""
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.syntax = capstone.CS_OPT_SYNTAX_ATT
    return md


def decode(code: bytes, address: int, limit: Optional[int] = None) -> Tuple[List[Insn], str]:
    """Walk ``code`` from its start up to ``limit``; return instructions and a walk error.

    ``code`` may run past ``limit`` (the symbol's size) so that an instruction
    straddling the end decodes with its true length; the walk error then says
    so instead of truncating silently.  Bytes capstone cannot decode become a
    ``(bad)`` entry, so the walk goes on the way objdump's does, and the entry
    is refused.  The walk error is "" when the last instruction ends exactly
    at ``limit``.
    """
    if limit is None:
        limit = len(code)
    out: List[Insn] = []
    off = 0
    md = _capstone()
    while off < limit:
        start = off
        for a, size, mnem, ops in md.disasm_lite(code[off:] if off else code, address + off):
            # Only capstone's "ud0"/"ud1" have a wrong length; skip the byte
            # check for everything else.
            fixed = _fixed_length(code, off, size) if mnem in _LENGTH_FIX_MNEMONICS else size
            out.append(Insn(off, fixed, mnem, ops))
            off += fixed
            if fixed != size or off >= limit:
                break  # restart capstone at the corrected boundary, or done
        if off == start:
            # capstone cannot decode these bytes.  The instruction is refused
            # either way; its length comes from iced-x86 when iced knows it
            # (newer extensions such as ENQCMDS), so the walk stays on the
            # real boundaries.  Otherwise the length is unknown and
            # context_refusals() refuses everything after it.
            size = _iced_length(code, off, address)
            out.append(Insn(off, size or 1, BAD, SIZED_BY_ICED if size else ""))
            off += size or 1
    err = ""
    if off != limit:
        err = f"decode walk ends at +{off}, past the symbol's end at +{limit}"
    return out, err


def _iced_length(code: bytes, off: int, address: int) -> int:
    """The length iced-x86 gives the instruction at ``off``, or 0 if it cannot either."""
    from iced_x86 import Code, Decoder

    ins = Decoder(64, code[off : off + 15], ip=address + off).decode()
    return 0 if ins.code == Code.INVALID else ins.len


def _fixed_length(code: bytes, off: int, size: int) -> int:
    """Correct capstone's length for the opcodes in ``LENGTH_FIXES``."""
    b0 = code[off]
    if b0 != 0x0F and b0 not in T.PREFIXES:
        return size
    i = off
    while i < len(code) and code[i] in T.PREFIXES:
        i += 1
    if i + 1 >= len(code) or (code[i], code[i + 1]) not in T.LENGTH_FIXES:
        return size
    return _modrm_end(code, i + 2) - off


def _modrm_end(code: bytes, rm: int) -> int:
    """Index just past ModR/M, SIB and displacement starting at ``rm``."""
    if rm >= len(code):
        return len(code)
    modrm = code[rm]
    mod, r_m = modrm >> 6, modrm & 7
    end = rm + 1
    if mod != 3 and r_m == 4:
        sib = code[end] if end < len(code) else 0
        end += 1
        if mod == 0 and sib & 7 == 5:
            end += 4
    if mod == 1:
        end += 1
    elif mod == 2 or (mod == 0 and r_m == 5):
        end += 4
    return min(end, len(code))


def modrm_index(b: bytes, opcidx: int) -> int:
    """Index of the ModR/M byte of the instruction in ``b``, or -1."""
    n = len(b)
    op = b[opcidx]
    if op == 0x0F:
        if opcidx + 1 >= n:
            return -1
        op2 = b[opcidx + 1]
        if op2 in (0x38, 0x3A):
            idx = opcidx + 3
        elif op2 in T.NO_MODRM_0F:
            return -1
        else:
            idx = opcidx + 2
    elif op == 0xC5:  # two-byte VEX, map 0f
        idx = -1 if opcidx + 2 < n and b[opcidx + 2] == 0x77 else opcidx + 3
    elif op == 0xC4:  # three-byte VEX
        if opcidx + 3 < n and b[opcidx + 1] & 0x1F == 1 and b[opcidx + 3] == 0x77:
            return -1
        idx = opcidx + 4
    elif op == 0x62:  # EVEX
        idx = opcidx + 5
    elif op == 0x8F and opcidx + 1 < n and b[opcidx + 1] & 0x1F >= 8:  # XOP
        idx = opcidx + 4
    elif op in _MODRM_1:
        idx = opcidx + 1
    else:
        return -1
    return idx if idx < n else -1
