"""The per-run system disk where no qcow2 overlay can be had: a sparse copy of the base.

bhyve reads no qcow2, and QEMU without ``qemu-img`` cannot make an overlay;
both then boot a private copy of the raw base image, which stays untouched.
Copying only the data regions keeps that quick: a 5 GB image with 1 GB of
data copies 1 GB.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def sparse_copy(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` keeping holes (SEEK_DATA/SEEK_HOLE), so a 5 GB image with 1 GB of data is quick."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        size = os.fstat(fi.fileno()).st_size
        pos = 0
        while pos < size:
            try:
                data_at = os.lseek(fi.fileno(), pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # only a hole remains
                    break
                data_at = pos  # no SEEK_DATA here: copy everything
            try:
                hole_at = os.lseek(fi.fileno(), data_at, os.SEEK_HOLE)
            except OSError:
                hole_at = size
            fi.seek(data_at)
            fo.seek(data_at)
            left = hole_at - data_at
            while left > 0:
                chunk = fi.read(min(left, 1 << 20))
                if not chunk:
                    break
                fo.write(chunk)
                left -= len(chunk)
            pos = hole_at
        fo.truncate(size)
    os.chmod(dst, 0o644)
