"""riscv's per-instruction records in a compact kinst table.

One byte per instruction, in order (the probe's offset is the sum of the
lengths before it):

    bit 0     the length: 1 for 4 bytes, 0 for 2 (compressed)
    bits 1-4  the code: 0-7 the table kinds, in ``probe_md.TABLE_KINDS``
              order; 15 refused, no probe
    bit 5     relocated: a relocation fills part of this instruction (module
              tables), so the digest zeroes it and the core reads it from the
              live copy, where the loader put its final value
    bits 6-7  zero

The emulation's fields are derived from the live instruction by the
portable core (``sys/modules/kinst/riscv/kinst_core.c``), which also checks
that it is of the recorded kind.  ``decode`` below is the C walker's
Python twin.
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence, Tuple

from ...common.errors import ClassifierError
from ..contract import CConst, StreamInsn
from ..dbp import record_codes
from .probe_md import TABLE_KINDS

_KIND_CODE = {k.kind: i for i, k in enumerate(TABLE_KINDS)}
REFUSED = 15
MASKED = 0x20
LONG = 0x01

RECORD_CODES = record_codes(len(TABLE_KINDS), REFUSED, (
    CConst("KINST_R_LONG", LONG, "record bit: a 4-byte instruction (else 2)"),
    CConst("KINST_R_CODE_SHIFT", 1, "the code's position in a record"),
    CConst("KINST_R_MASKED", MASKED, "record bit: a relocation fills part of the instruction"),
))


def record(length: int, kind: Optional[str], dispoff: int = 0, masks: Sequence[Tuple[int, int]] = ()) -> bytes:
    """The record of one instruction: ``kind`` None for a refused one; any ``masks`` mark it relocated."""
    if length not in (2, 4):
        raise ClassifierError(f"instruction of {length} bytes: kinstkit's riscv instructions are 2 or 4")
    code = REFUSED if kind is None else _KIND_CODE[kind]
    return bytes(((LONG if length == 4 else 0) | code << 1 | (MASKED if masks else 0),))


def with_masks(records: bytes, masks: Sequence[Tuple[int, int]]) -> bytes:
    """``records`` with every instruction that a relocated field (offset, width) overlaps marked relocated."""
    out = bytearray(records)
    starts = []
    off = 0
    for b in records:
        starts.append((off, 4 if b & LONG else 2))
        off += starts[-1][1]
    for moff, width in masks:
        hit = [i for i, (o, n) in enumerate(starts) if o < moff + width and moff < o + n]
        if not hit:
            raise ClassifierError(f"relocated field {width}@+{moff} lies past the function's instructions")
        for i in hit:
            out[i] |= MASKED
    return bytes(out)


def decode(stream: bytes, size: Optional[int] = None) -> Iterator[StreamInsn]:
    """The instructions a function's records describe, in order (up to ``size`` bytes of function, if given)."""
    off = 0
    for i, b in enumerate(stream):
        if size is not None and off >= size:
            return
        length = 4 if b & LONG else 2
        code = b >> 1 & 15
        if b & 0xC0 or (code >= len(TABLE_KINDS) and code != REFUSED):
            raise ClassifierError(f"record {b:#04x} at byte {i} of a table stream")
        kind = None if code == REFUSED else TABLE_KINDS[code].kind
        yield StreamInsn(off, length, kind, 0, ((0, length),) if b & MASKED else ())
        off += length
