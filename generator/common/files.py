"""Writing results so that nothing is ever half-written.

Generated sources, manifests, benchmark results and installed ``.ko`` files
are written to a temporary file beside their destination and renamed into
place: an interrupted or failed run leaves the old file or the new one,
never a mix, and a set of files is written all or none.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence, Tuple


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def write_all(files: Sequence[Tuple[Path, str]]) -> None:
    """Write every file or none: temporaries first, then renames."""
    temps = []
    try:
        for path, text in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = _temporary(path)
            tmp.write_text(text)
            temps.append((tmp, path))
        for tmp, path in temps:
            os.replace(tmp, path)
    finally:
        for tmp, _ in temps:
            if tmp.exists():
                tmp.unlink()


def write_bytes(path: Path, data: bytes) -> None:
    """``data`` written through a temporary file and a rename: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json(path: Path, data: object) -> None:
    """``data`` as indented, key-sorted JSON, written through a temporary file and a rename."""
    write_all([(path, json.dumps(data, indent=2, sort_keys=True) + "\n")])


def install(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` through a temporary file and a rename: ``dst`` is the old file or the new one."""
    tmp = _temporary(dst)
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def sha256_file(path: Path) -> str:
    """The file's sha256, read a megabyte at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def locked(directory: Path, name: str) -> Iterator[None]:
    """One process fills a cache entry at a time (an flock on ``directory/.name.lock``): concurrent
    commands, test processes and branches share the cache."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
