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
is of the recorded kind.  ``dbp.ByteRecords`` reads and writes the
records, which the C walker reads with the same bits.
"""

from __future__ import annotations

from .probe_md import TABLE_KINDS
from ..contract import CConst
from ..dbp import ByteRecords

MASKED = 0x10
RECORDS = ByteRecords("arm64", TABLE_KINDS, short=4, long=0, code_shift=0, masked=MASKED)
REFUSED = RECORDS.refused
RECORD_CODES = RECORDS.codes((
    CConst("KINST_R_MASKED", MASKED, "record bit: a relocation fills part of the word"),
    CConst("KINST_R_CODE", 15, "record bits of the code"),
))
record, with_masks, decode = RECORDS.record, RECORDS.with_masks, RECORDS.decode
