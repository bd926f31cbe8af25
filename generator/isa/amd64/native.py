"""amd64 native accelerator: the summary walk in C, compiled on first use.

``fast.summarise`` costs about half a microsecond an instruction, most of it
crossing from Python into iced-x86 for every instruction.  ``kk_accel.c``
walks a whole function per call with a table lookup per instruction
(``opmap.py`` makes the table from iced-x86 and checks every entry against
it), so whole-image summaries cost little more than reading the symbols.

It is an accelerator for the accelerator: wherever the C walk declines (an
encoding its table does not cover, a VEX prefix, a truncated tail), or no C
compiler is found, ``fast`` decides, and where that declines, capstone.
The tests hold all three equal on real images and on random bytes.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
from array import array
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from generator.common.paths import CACHE
from generator.isa.amd64 import probe_md as M


class Summary(NamedTuple):
    """What ``probes --summary`` prints for one function (``fast.Summary`` is this one)."""

    instructions: int
    kinds: Dict[str, int]  # probes with status ok, by kind, in kind-name order
    skipped: int  # instructions refused on their own account
    frame_rules: Tuple[str, ...]  # the prologue rules the function passes ('any', 'first')
    walk_error: str


SOURCE_DIR = Path(__file__).resolve().parent / "accel"
SOURCES = ("kk_accel.c", "kk_opmap.h")
CACHE_DIR = CACHE / "accel"
ENV_DISABLE = "KINSTKIT_NO_NATIVE"  # set to use iced-x86 only (the tests compare the two)

# The summary's counter per kind (fast.py counts the same way); here so that
# importing this module does not import iced-x86.
KIND_CODES = {kind.kind: i + 1 for i, kind in enumerate(M.TABLE_KINDS)}
_KINDS_BY_NAME = sorted(KIND_CODES.items())
_TRAMPOLINE = KIND_CODES[M.KIND_TRAMPOLINE]
# kk_accel.c's result row per function.
ROW = 16
_DECLINED = 0xFFFFFFFF
_ROW_KINDS = tuple((name, 2 + code) for name, code in _KINDS_BY_NAME)
_ROW_REFUSED = 15
_ROW_FIRST_KIND = 2 + min(KIND_CODES.values())
_ROW_TRAMPOLINE = 2 + _TRAMPOLINE


def _compiler() -> Optional[str]:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def library_path() -> Path:
    """Where the shared object for the current sources lives (named by their digest)."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((SOURCE_DIR / name).read_bytes())
    return CACHE_DIR / f"kk_accel-{h.hexdigest()[:16]}.so"


def build(path: Path, cc: str) -> bool:
    """Compile ``kk_accel.c`` to ``path``, through a temporary name so a reader never sees half a file.

    False when it cannot (no writable cache, a compiler error): the caller then goes without.
    """
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    cmd = [cc, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(SOURCE_DIR / "kk_accel.c")]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        ok = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
        if ok:
            os.replace(tmp, path)
        return ok
    except OSError:
        return False
    finally:
        if tmp.exists():
            tmp.unlink()


@functools.lru_cache(maxsize=None)
def library() -> Optional[ctypes.CDLL]:
    """The loaded accelerator, built if need be; None without a compiler (or with ``KINSTKIT_NO_NATIVE``)."""
    if os.environ.get(ENV_DISABLE):
        return None
    path = library_path()
    if not path.is_file():
        cc = _compiler()
        if cc is None or not build(path, cc):
            return None
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        return None
    fn = lib.kk_summarise
    fn.argtypes = (ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    fn.restype = ctypes.c_size_t
    return lib


def prepare() -> bool:
    """Build and load the C walk now (before workers fork, so they share it); whether it is in use."""
    return library() is not None


def summarise_native(items: Sequence[Tuple[bytes, int, int]]) -> List[Optional[Summary]]:
    """The C walk's summary of each (code, address, limit), None where it declines (or cannot run)."""
    lib = library()
    if lib is None:
        return [None] * len(items)
    starts, limits, pos = array("Q"), array("Q"), 0
    for code, _, limit in items:
        starts.append(pos)
        limits.append(min(limit, len(code)))
        pos += len(code)
    rows = array("I", bytes(4 * ROW * len(items)))
    lib.kk_summarise(b"".join(code for code, _, _ in items), len(items), starts.buffer_info()[0],
                     limits.buffer_info()[0], rows.buffer_info()[0])
    vals = rows.tolist()
    out: List[Optional[Summary]] = []
    for k, (code, _, limit) in enumerate(items):
        r = k * ROW
        n = vals[r]
        if n == _DECLINED or limit > len(code):
            out.append(None)
            continue
        skipped = vals[r + _ROW_REFUSED]
        # The walk counts every kind but the trampoline: that is what remains.
        vals[r + _ROW_TRAMPOLINE] = n - skipped - sum(vals[r + _ROW_FIRST_KIND : r + _ROW_REFUSED])
        kinds = {name: vals[r + i] for name, i in _ROW_KINDS if vals[r + i]}
        first = code[:1] == b"\x55"
        rules = ("any", "first") if first else ("any",) if vals[r + 1] else ()
        out.append(Summary(n, kinds, skipped, rules, ""))
    return out


def summarise_many(items: Sequence[Tuple[bytes, int, int]]) -> List[Optional[Summary]]:
    """``fast.summarise`` of each (code, address, limit), by the C walk where it can."""
    out = summarise_native(items)
    for k, s in enumerate(out):
        if s is None:
            from generator.isa.amd64 import fast

            out[k] = fast.summarise(*items[k])
    return out


def summarise(code: bytes, address: int, limit: int) -> Optional[Summary]:
    return summarise_many([(code, address, limit)])[0]


def stream(code: bytes, address: int, limit: int):
    """Table records: iced-x86's (``fast.stream``); the C walk only summarises."""
    from generator.isa.amd64 import fast

    return fast.stream(code, address, limit)
