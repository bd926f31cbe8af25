"""A worker's spilled chunk is copied out whole, once, and removed, whatever the stream."""

from __future__ import annotations

import io

from generator.analysis.whole import Spilled


def _spill(tmp_path, data: bytes) -> Spilled:
    path = tmp_path / "chunk.jsonl"
    path.write_bytes(data)
    return Spilled(str(path), data.count(b"\n"))


def test_copied_to_a_file_by_the_kernel(tmp_path):
    data = b"".join(b'{"n":%d}\n' % i for i in range(50000))
    chunk = _spill(tmp_path, data)
    out = tmp_path / "out"
    with open(out, "wb") as f:
        f.write(b"before\n")
        chunk.copy_to(f)
    assert out.read_bytes() == b"before\n" + data
    assert len(chunk) == 50000
    assert not (tmp_path / "chunk.jsonl").exists()


def test_copied_by_hand_to_a_stream_without_a_descriptor(tmp_path):
    data = b"a\nb\n" * 1000
    chunk = _spill(tmp_path, data)
    out = io.BytesIO()
    chunk.copy_to(out)
    assert out.getvalue() == data
    assert not (tmp_path / "chunk.jsonl").exists()
