"""amd64's per-instruction records in a compact kinst table.

A table keeps, per function, one record per instruction, in order; the
probe's offset is the sum of the lengths before it.  Everything else kinst
needs (the template, the displacement, the registers of an emulated call)
is derived from the live instruction when a probe is made, by the portable
core (``sys/modules/kinst/amd64/kinst_core.c``), after the function's digest
has shown that the live bytes are the analysed ones.  So a record holds only
what cannot be read back cheaply:

    byte 0: bits 0-3 length - 1 (1..15 bytes), bits 4-7 a code:
        0-9   the table kinds, in ``kinds.txt`` order; for riprel (1)
              the rel32 is the instruction's last four bytes
        10-12 riprel followed by a 1-, 2- or 4-byte immediate: the rel32 ends
              1, 2 or 4 bytes before the instruction does
        13    refused: no probe
        15    extended: byte 1 holds the code (bits 0-3) and how many masked
              fields follow (bits 4-7, 1..15); each is one byte, its offset in
              the instruction (bits 0-3) and its width (bits 4-5: 1, 2, 4, 8)

A masked field is one a relocation fills (module tables): the digest skips
it and the core reads it from the live instruction.  The C walker
(``kinst_core_next``) reads exactly this; ``decode`` below is its Python twin,
for the harness's reports and the tests.
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence, Tuple

from ...common.errors import ClassifierError
from .probe_md import TABLE_KINDS
from ..contract import CConst, StreamInsn, WordSet

_RIPREL = TABLE_KINDS.code("riprel")
_KIND_RIPREL = TABLE_KINDS[_RIPREL].kind
RIPREL_IMM = {0: _RIPREL, 1: 10, 2: 11, 4: 12}  # immediate size after the rel32 -> record code
_IMM_OF_CODE = {_RIPREL: 0, 10: 1, 11: 2, 12: 4}
REFUSED = 13
EXTENDED = 15
_WIDTH_CODE = {1: 0, 2: 1, 4: 2, 8: 3}

# What kinst_encoding.h defines for the C walker (kinst_core_next), beside the kinds.
RECORD_CODES = (
    CConst("KINST_NKINDS", len(TABLE_KINDS), "record codes below this are enum kinst_kind"),
    CConst("KINST_R_RIPREL_IMM1", RIPREL_IMM[1], "riprel, a 1-byte immediate after the rel32"),
    CConst("KINST_R_RIPREL_IMM2", RIPREL_IMM[2], "riprel, a 2-byte immediate after the rel32"),
    CConst("KINST_R_RIPREL_IMM4", RIPREL_IMM[4], "riprel, a 4-byte immediate after the rel32"),
    CConst("KINST_R_REFUSED", REFUSED, "no probe: the instruction is refused"),
    CConst("KINST_R_EXTENDED", EXTENDED, "code and relocated fields in the bytes that follow"),
)
_WIDTHS = (1, 2, 4, 8)
# Where a record code's %rip-relative disp32 lies: this many bytes before the instruction's end (its
# immediate after it, then the disp32), 0: none.  The core's kinst_core_next() indexes it by code.
DISP_TAIL = WordSet("KINST_DISP_TAIL", tuple(4 + _IMM_OF_CODE[c] if c in _IMM_OF_CODE else 0 for c in range(16)),
                    "by record code: bytes from the disp32 to the instruction's end, 0: none")


REFUSED_ROW = 0xFF  # in ``records``' kinds: the instruction is refused
_RIPREL_ROW = bytes((_RIPREL,))
_MINUS_ONE = bytes((b - 1) & 0xFF for b in range(256))
_CODE_SHIFTED = bytes((i if i < len(TABLE_KINDS) else REFUSED) << 4 for i in range(256))  # kind index -> code << 4


def records(lengths: bytes, kinds: bytes, dispoffs: bytes) -> bytes:
    """The records of a function's instructions (no relocated fields), from three columns of bytes: each
    one's length, its table kind's index (``REFUSED_ROW``: refused) and where a riprel one's rel32 is.

    What ``record`` writes for one instruction, for all of them at once:
    ``bytes.translate`` maps the kinds to codes and the lengths to length - 1,
    and the two nibbles meet in one integer OR over the whole function.
    """
    n = len(lengths)
    if n == 0:
        return b""
    if min(lengths) < 1 or max(lengths) > 15:
        raise ClassifierError("an instruction outside 1 to 15 bytes: amd64 instructions are 1 to 15 bytes")
    codes = bytearray(kinds.translate(_CODE_SHIFTED))
    i = kinds.find(_RIPREL_ROW)
    while i >= 0:
        codes[i] = code_of(_KIND_RIPREL, lengths[i], dispoffs[i]) << 4
        i = kinds.find(_RIPREL_ROW, i + 1)
    low = int.from_bytes(lengths.translate(_MINUS_ONE), "little")
    return (low | int.from_bytes(codes, "little")).to_bytes(n, "little")


def code_of(kind: Optional[str], length: int, dispoff: int) -> int:
    """The record code of an instruction: its table kind, with riprel's immediate size folded in."""
    if kind is None:
        return REFUSED
    code = TABLE_KINDS.code(kind)
    if code == _RIPREL:
        imm = length - 4 - dispoff
        if imm not in RIPREL_IMM:
            raise ClassifierError(f"riprel instruction of {length} bytes with its rel32 at {dispoff}: no record code")
        code = RIPREL_IMM[imm]
    return code


def record(length: int, kind: Optional[str], dispoff: int = 0, masks: Sequence[Tuple[int, int]] = ()) -> bytes:
    """The record of one instruction: ``kind`` None for a refused one; ``dispoff`` where a riprel
    instruction's rel32 is; ``masks`` (offset, width) of relocated fields."""
    if not 1 <= length <= 15:
        raise ClassifierError(f"instruction of {length} bytes: amd64 instructions are 1 to 15 bytes")
    code = code_of(kind, length, dispoff)
    if not masks:
        return records(bytes((length,)), bytes((REFUSED_ROW if kind is None else TABLE_KINDS.code(kind),)),
                       bytes((dispoff,)))
    if len(masks) > 15:
        raise ClassifierError(f"{len(masks)} relocated fields in one instruction")
    out = bytearray(((length - 1) | EXTENDED << 4, code | len(masks) << 4))
    for off, width in masks:
        if not 0 <= off < length or width not in _WIDTH_CODE or off + width > length:
            raise ClassifierError(f"relocated field {width}@{off} does not lie inside a {length}-byte instruction")
        out.append(off | _WIDTH_CODE[width] << 4)
    return bytes(out)


def with_masks(records: bytes, masks: Sequence[Tuple[int, int]]) -> bytes:
    """``records`` (no extended ones yet) with each instruction naming the relocated fields inside it.

    ``masks`` are (offset in the function, width).  One pass over both,
    touching only the records of instructions that hold a field.
    """
    masks = sorted(masks)
    out = bytearray()
    off = m = 0
    n = len(masks)
    for b in records:
        end = off + (b & 15) + 1
        if m < n and masks[m][0] < end:
            first = m
            while m < n and masks[m][0] < end:
                m += 1
            mine = [(a - off, w) for a, w in masks[first:m] if a >= off]
            if mine:
                if b >> 4 == EXTENDED or len(mine) > 15:
                    raise ClassifierError(f"cannot name {len(mine)} relocated fields in the record at +{off}")
                out += bytes(((b & 15) | EXTENDED << 4, (b >> 4) | len(mine) << 4))
                for a, w in mine:
                    if a + w > end - off or w not in _WIDTH_CODE:
                        raise ClassifierError(f"relocated field {w}@+{off + a} does not lie inside one instruction")
                    out.append(a | _WIDTH_CODE[w] << 4)
                off = end
                continue
        out.append(b)
        off = end
    return bytes(out)


def decode(stream: bytes, size: Optional[int] = None) -> Iterator[StreamInsn]:
    """The instructions a function's records describe, in order (up to ``size`` bytes of function, if given)."""
    i = off = 0
    while i < len(stream) and (size is None or off < size):
        b0 = stream[i]
        length = (b0 & 15) + 1
        code = b0 >> 4
        i += 1
        masks: Tuple[Tuple[int, int], ...] = ()
        if code == EXTENDED:
            b1 = stream[i]
            code, n = b1 & 15, b1 >> 4
            masks = tuple((m & 15, _WIDTHS[(m >> 4) & 3]) for m in stream[i + 1 : i + 1 + n])
            i += 1 + n
        if code == REFUSED:
            yield StreamInsn(off, length, None, 0, masks)
        elif code in _IMM_OF_CODE:
            yield StreamInsn(off, length, _KIND_RIPREL, length - 4 - _IMM_OF_CODE[code], masks)
        elif code < len(TABLE_KINDS):
            yield StreamInsn(off, length, TABLE_KINDS[code].kind, 0, masks)
        else:
            raise ClassifierError(f"record code {code} at byte {i - 1} of a table stream")
        off += length
