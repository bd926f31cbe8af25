"""The iced-x86 accelerator hands what it is unsure of back to capstone, the decoder of record.

tests/toolchain/test_accelerator.py holds the two paths equal on real images.
"""

from __future__ import annotations

from generator.isa.amd64 import fast as amd64_fast


def test_accelerator_declines_invalid_bytes():
    """An encoding iced calls invalid goes back to capstone, the authority."""
    code = bytes.fromhex("55 4889e5 9a0000000000 5dc3".replace(" ", ""))
    assert amd64_fast.summarise(code, 0x1000, len(code)) is None
