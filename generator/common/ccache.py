"""Compiling C on the host once per content: one content key, one build directory, one rename.

Every C build of the host side (the sample kernel, the harness library, the
analysis accelerators) is a directory of outputs determined by its inputs.
``compile_cached`` makes that directory once: it builds in a temporary
directory beside the cache entry and renames it into place, so a reader sees
no entry or a whole one, and two processes that race build the same thing
and keep whichever lands first.  Compiler commands run through
``generator.common.tools.checked``, which turns a failure into one line.

The key is zlib's CRC-32 and Adler-32 with the length, not sha256: a cache
key only has to change when a byte does, and OpenSSL's start-up (hashlib)
costs a process 4 ms, more than the rest of finding a built accelerator.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

from .errors import UserError

Part = Union[bytes, str]


def content_key(parts: Iterable[Part]) -> str:
    """A short name that changes whenever any byte of ``parts`` (or where one part ends) does."""
    crc, adler, length = 0, 1, 0  # the two checksums' own starting values
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        # Each part is followed by a NUL, so ("ab", "c") and ("a", "bc") differ; summed on, not appended (a
        # copy of the 350 kB opcode map).
        crc, adler = zlib.crc32(b"\0", zlib.crc32(data, crc)), zlib.adler32(b"\0", zlib.adler32(data, adler))
        length += len(data) + 1
    return f"{crc:08x}{adler:08x}{length & 0xFFFF:04x}"


def compile_cached(cache_dir: Path, key: str, make: Callable[[Path], None], *, marker: str,
                   rebuild: bool = False) -> Path:
    """The directory ``cache_dir/key``, made by ``make(tmpdir)`` unless it holds ``marker`` already.

    ``marker`` is the file a complete build always has (the library, the
    kernel).  ``make`` builds everything into the directory it is given;
    whatever it raises propagates, and nothing is left behind.  ``rebuild``
    replaces an existing entry.
    """
    final = cache_dir / key
    if (final / marker).is_file() and not rebuild:
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp.", dir=cache_dir))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would make a shared cache private
        make(tmp)
        if not (tmp / marker).is_file():
            raise UserError(f"building {final} made no {marker}")
        _install(tmp, final, marker)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _install(tmp: Path, final: Path, marker: str) -> None:
    """Rename a finished build into place; an old entry is renamed aside first, a racing one kept."""
    old: Optional[Path] = None
    if final.exists():
        old = final.with_name(f".{final.name}.old.{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        try:
            os.rename(final, old)
        except OSError:
            old = None
    try:
        os.rename(tmp, final)
    except OSError:
        if not (final / marker).is_file():  # another process installed the same key: as good as ours
            raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

