"""arm64's per-instruction records in a compact kinst table.

Every A64 instruction is one 4-byte word, so a record needs no length: one
byte per word, in order (the probe's offset is four times its index),

    bits 0-3  the code: 0-9 the table kinds, in ``probe_md.TABLE_KINDS``
              order; 15 refused, no probe
    bit 4     relocated: a relocation fills part of this word (module
              tables), so the digest zeroes the whole word and the core reads
              it from the live copy, where the loader put its final value
    bits 5-7  zero

Everything else the emulation needs -- the class's fields, the register, the
offset -- is derived from the live word by the portable core
(``sys/modules/kinst/arm64/kinst_core.c``), which also checks that the word
is of the recorded kind.  ``decode`` below is the C walker's Python twin.
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence, Tuple

from ...common.errors import ClassifierError
from .probe_md import TABLE_KINDS
from ..contract import CConst, StreamInsn
from ..dbp import record_codes

_KIND_CODE = {k.kind: i for i, k in enumerate(TABLE_KINDS)}
REFUSED = 15
MASKED = 0x10
INSN_SIZE = 4

RECORD_CODES = record_codes(len(TABLE_KINDS), REFUSED, (
    CConst("KINST_R_MASKED", MASKED, "record bit: a relocation fills part of the word"),
    CConst("KINST_R_CODE", 15, "record bits of the code"),
))
_WORD_MASK = ((0, INSN_SIZE),)


def record(length: int, kind: Optional[str], dispoff: int = 0, masks: Sequence[Tuple[int, int]] = ()) -> bytes:
    """The record of one word: ``kind`` None for a refused one; any ``masks`` mark it relocated."""
    if length != INSN_SIZE:
        raise ClassifierError(f"instruction of {length} bytes: every arm64 instruction is 4")
    code = REFUSED if kind is None else _KIND_CODE[kind]
    return bytes((code | (MASKED if masks else 0),))


def with_masks(records: bytes, masks: Sequence[Tuple[int, int]]) -> bytes:
    """``records`` with every word that a relocated field (offset, width) overlaps marked relocated."""
    out = bytearray(records)
    for off, width in masks:
        for i in range(off // INSN_SIZE, (off + width + INSN_SIZE - 1) // INSN_SIZE):
            if i >= len(out):
                raise ClassifierError(f"relocated field {width}@+{off} lies past the function's words")
            out[i] |= MASKED
    return bytes(out)


def decode(stream: bytes, size: Optional[int] = None) -> Iterator[StreamInsn]:
    """The words a function's records describe, in order (up to ``size`` bytes of function, if given)."""
    for i, b in enumerate(stream):
        off = i * INSN_SIZE
        if size is not None and off >= size:
            return
        code = b & 15
        if b & ~(MASKED | 15) or (code >= len(TABLE_KINDS) and code != REFUSED):
            raise ClassifierError(f"record {b:#04x} at byte {i} of a table stream")
        kind = None if code == REFUSED else TABLE_KINDS[code].kind
        yield StreamInsn(off, INSN_SIZE, kind, 0, _WORD_MASK if b & MASKED else ())
