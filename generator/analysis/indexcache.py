"""The line and inline index, built once per image and cached under ``<cache>/dwarf/`` by build-id.

Reading DWARF takes seconds to minutes; loading the index takes
milliseconds.  The file is a magic line, a JSON header (strings, array
lengths, the SHA-256 of the payload) and the arrays' raw bytes.  Nothing in
it is trusted: a file that is short, has another version or byte order, a
payload whose digest differs, or indices past the tables they index, is
rebuilt, never used.  It is written through a temporary file and a rename,
so a reader never sees half a file.

The key is the image's build-id (the same code has the same build-id,
stripped or not), or the image's SHA-256 when it has none.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from array import array
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

from .dwarfindex import ARRAYS, NO_FILE, DwarfIndex
from .dwarfread import build
from ..common.errors import UserError
from ..common.files import write_bytes
from ..common.paths import CACHE
from ..image.debuginfo import DEFAULT_ROOTS, DebugInfo, locate, open_debug
from ..image.elf import KernelImage

FORMAT = 1
MAGIC = b"KINSTKIT-DWARF-INDEX\n"
CACHE_DIR = CACHE / "dwarf"

# Which array indexes which table: (array, the table it points into, entries allowed to be NO_FILE).
_BOUNDS: Tuple[Tuple[str, str, bool], ...] = (
    ("row_file", "files", True), ("line_rows", "row_addr", False), ("sub_name", "names", False),
    ("sub_file", "files", True), ("inl_name", "names", False), ("inl_call_file", "files", True),
    ("inl_sub", "sub_name", False), ("span_sub", "sub_name", False),
)


def cache_key(build_id: Optional[str], sha256: str) -> str:
    return build_id if build_id else f"sha256-{sha256}"


def cache_path(key: str, cache_dir: Path = CACHE_DIR) -> Path:
    return cache_dir / f"{key}.v{FORMAT}.idx"


def dumps(index: DwarfIndex) -> bytes:
    """The index as bytes (see the module docstring)."""
    payload = b"".join(getattr(index, name).tobytes() for name, _ in ARRAYS)
    header = {
        "format": FORMAT,
        "byteorder": sys.byteorder,
        "build_id": index.build_id,
        "image": index.image,
        "debug": index.debug,
        "files": index.files,
        "names": index.names,
        "arrays": [[name, code, array(code).itemsize, len(getattr(index, name))] for name, code in ARRAYS],
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    head = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    return MAGIC + struct.pack("<Q", len(head)) + head + payload


class CorruptIndex(ValueError):
    """A cache file that must not be used."""


def loads(data: bytes) -> DwarfIndex:
    """The index in ``data``; CorruptIndex when anything about it is off."""
    try:
        return _loads(data)
    except CorruptIndex:
        raise
    except (ValueError, KeyError, TypeError, IndexError, struct.error, UnicodeDecodeError) as e:
        raise CorruptIndex(f"unreadable: {e}") from None


def _loads(data: bytes) -> DwarfIndex:
    if not data.startswith(MAGIC):
        raise CorruptIndex("no magic")
    pos = len(MAGIC)
    (hlen,) = struct.unpack_from("<Q", data, pos)
    pos += 8
    if pos + hlen > len(data):
        raise CorruptIndex("short header")
    header = json.loads(data[pos : pos + hlen])
    pos += hlen
    if header["format"] != FORMAT or header["byteorder"] != sys.byteorder:
        raise CorruptIndex("another format or byte order")
    payload = data[pos:]
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise CorruptIndex("payload digest differs")
    arrays: Dict[str, array] = {}
    specs = {name: (code, size, n) for name, code, size, n in header["arrays"]}
    off = 0
    for name, code in ARRAYS:
        got_code, size, n = specs[name]
        a = array(code)
        if got_code != code or size != a.itemsize:
            raise CorruptIndex(f"array {name}: type {got_code}/{size}")
        a.frombytes(payload[off : off + n * size])
        if len(a) != n:
            raise CorruptIndex(f"array {name}: short")
        arrays[name] = a
        off += n * size
    if off != len(payload):
        raise CorruptIndex("trailing bytes")
    files, names = header["files"], header["names"]
    if not all(isinstance(s, str) for s in files + names):
        raise CorruptIndex("strings")
    index = DwarfIndex(header["build_id"], header["image"], header["debug"], files, names, **arrays)
    _check_bounds(index)
    return index


def _check_bounds(index: DwarfIndex) -> None:
    """Every index points into its table and every range into the range arrays: a query never raises."""
    sizes = {"files": len(index.files), "names": len(index.names), "row_addr": len(index.row_addr),
             "sub_name": len(index.sub_name)}
    for name, table, may_be_none in _BOUNDS:
        values = getattr(index, name)
        bad = [v for v in values if v >= sizes[table] and not (may_be_none and v == NO_FILE)][:1]
        if bad:
            raise CorruptIndex(f"{name} points past {table}")
    n = len(index.rng_low)
    if len(index.rng_high) != n:
        raise CorruptIndex("range arrays")
    for first, count in (("sub_rng_first", "sub_rng_count"), ("inl_rng_first", "inl_rng_count"),
                         ("sub_inl_first", "sub_inl_count")):
        limit = n if first != "sub_inl_first" else len(index.inl_name)
        if any(f + c > limit for f, c in zip(getattr(index, first), getattr(index, count))):
            raise CorruptIndex(f"{first} past its table")
    per_row = {len(getattr(index, a)) for a in ("row_addr", "row_file", "row_line", "row_flags")}
    per_sub = {len(getattr(index, a)) for a in ("sub_name", "sub_file", "sub_line", "sub_rng_first", "sub_rng_count",
                                                "sub_inl_first", "sub_inl_count")}
    per_inl = {len(getattr(index, a)) for a in ("inl_name", "inl_depth", "inl_call_file", "inl_call_line",
                                                "inl_rng_first", "inl_rng_count", "inl_sub")}
    if len(per_row) != 1 or len(per_sub) != 1 or len(per_inl) != 1 or len(index.line_keys) != len(index.line_rows):
        raise CorruptIndex("array lengths disagree")
    if len(index.name_flags) != len(index.names) or not len(index.span_low) == len(index.span_high) == len(
            index.span_sub):
        raise CorruptIndex("array lengths disagree")


def load(path: Path) -> Optional[DwarfIndex]:
    """The cached index at ``path``, or None when it is missing or must be rebuilt."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return loads(data)
    except CorruptIndex:
        return None


def store(path: Path, index: DwarfIndex) -> None:
    write_bytes(path, dumps(index))


def open_index(img: KernelImage, debug: Optional[str] = None, roots: Sequence[str] = DEFAULT_ROOTS,
               progress: bool = False, cache_dir: Path = CACHE_DIR) -> Tuple[DwarfIndex, DebugInfo]:
    """The index of ``img``: from the cache, or read from its DWARF and cached.

    The debug file is located (and checked against the image) every time,
    even on a cache hit: a stale ``--debug`` file is an error whether or not
    an index exists, and a stripped image takes the debug file's symbols.
    ``progress`` shows the first read on stderr.
    """
    if img.e_type == "ET_REL":
        raise UserError(f"{img.path}: source lines and inlined copies are read from linked images (a kernel, a "
                        "shared object); the DWARF of a relocatable module is not supported")
    info = locate(img, debug, roots)
    dbg = open_debug(img, info)
    path = cache_path(cache_key(img.build_id, img.sha256() if not img.build_id else ""), cache_dir)
    index = load(path)
    if index is not None and index.build_id == (img.build_id or ""):
        return index, info
    report = _progress(info.path) if progress else None
    index = build(img, dbg, report)
    if report is not None:
        sys.stderr.write("\n")
    store(path, index)
    return index, info


def _progress(path: str):
    def report(done: int, total: int) -> None:
        sys.stderr.write(f"\rreading the DWARF of {path} (once; cached by build-id): {100 * done // max(total, 1)}%")
        sys.stderr.flush()

    return report
