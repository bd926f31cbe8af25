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
that it is of the recorded kind.  ``dbp.ByteRecords`` reads and writes
the records, which the C walker reads with the same bits.
"""

from __future__ import annotations

from ..contract import CConst
from ..dbp import ByteRecords
from .probe_md import TABLE_KINDS

MASKED = 0x20
LONG = 0x01
RECORDS = ByteRecords("riscv", TABLE_KINDS, short=2, long=LONG, code_shift=1, masked=MASKED)
REFUSED = RECORDS.refused
RECORD_CODES = RECORDS.codes((
    CConst("KINST_R_LONG", LONG, "record bit: a 4-byte instruction (else 2)"),
    CConst("KINST_R_CODE_SHIFT", 1, "the code's position in a record"),
    CConst("KINST_R_MASKED", MASKED, "record bit: a relocation fills part of the instruction"),
))
record, with_masks, decode = RECORDS.record, RECORDS.with_masks, RECORDS.decode
