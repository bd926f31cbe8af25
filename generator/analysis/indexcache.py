"""The DWARF index of an image, read unit by unit as queries need it, and cached.

A query reads the unit directory (``dwarfdir``: every unit's header and
file table, ``.debug_aranges``), then only the units it can match
(``dwarfread``): ``FILE:LINE`` the line programs of the units whose file
table names FILE and the DIEs of those with rows of the line; an address
the unit covering it; ``--inline`` every unit's DIEs.  Each of these -- the
directory, a unit's lines, a unit's DIEs -- is cached on its own under
``<cache>/dwarf/<image key>/``: a kernel's first query reads a few MB of
its 600, later ones load a few small files.

The cache is never trusted.  An entry is a magic line, a JSON header and
raw arrays; it carries the byte ranges of the DWARF it was read from and
their digest (``image.dwarf.sections``), and is used only when the file in
hand gives the same digest over the same ranges -- so a copy corrupted
where the entry was read from is read again, although its build-id is the
same -- and only when its own payload is intact and every index in it
points into its table.  Anything off is read again, never used.  Entries
are written through a temporary file and a rename.  The image key (its
build-id, else a digest of its headers) only names the folder.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from array import array
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from . import dwarfdir, dwarfread
from .dwarfdir import DIR_ARRAYS, Directory
from .dwarfindex import ARRAYS, NO_FILE, DwarfIndex
from ..common.errors import UserError
from ..common.files import write_bytes
from ..common.paths import CACHE
from ..image.debuginfo import DEFAULT_ROOTS, DebugInfo, locate, open_debug
from ..image.dwarf.sections import DwarfError, Reads, Sections, digest, image_key
from ..image.elf import KernelImage

FORMAT = 2
MAGIC = b"KINSTKIT-DWARF-INDEX\n"
CACHE_DIR = CACHE / "dwarf"

# What malformed DWARF raises in the reader besides DwarfError: every read is bounds-checked, but a
# value used as a size or an offset can still be absurd.
_BAD_DWARF = (DwarfError, IndexError, struct.error, OverflowError, ValueError, KeyError, MemoryError, RecursionError)

# Which array indexes which table: (array, the table it points into, entries allowed to be NO_FILE).
_BOUNDS: Tuple[Tuple[str, str, bool], ...] = (
    ("row_file", "files", True), ("line_rows", "row_addr", False), ("sub_name", "names", False),
    ("sub_file", "files", True), ("inl_name", "names", False), ("inl_call_file", "files", True),
    ("inl_sub", "sub_name", False), ("span_sub", "sub_name", False), ("blk_sub", "sub_name", False),
)


class CorruptIndex(ValueError):
    """A cache file that must not be used."""


# -- the container ---------------------------------------------------------------------


def _pack(kind: str, meta: dict, strings: Dict[str, List[str]], arrays: Sequence[Tuple[str, str, array]]) -> bytes:
    payload = b"".join(a.tobytes() for _, _, a in arrays)
    header = {
        "format": FORMAT,
        "kind": kind,
        "byteorder": sys.byteorder,
        "meta": meta,
        "strings": strings,
        "arrays": [[name, code, array(code).itemsize, len(a)] for name, code, a in arrays],
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    head = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    return MAGIC + struct.pack("<Q", len(head)) + head + payload


def _unpack(data: bytes, kind: str, spec: Sequence[Tuple[str, str]]) -> Tuple[dict, Dict[str, array]]:
    try:
        return _unpack_checked(data, kind, spec)
    except CorruptIndex:
        raise
    except (ValueError, KeyError, TypeError, IndexError, struct.error, UnicodeDecodeError) as e:
        raise CorruptIndex(f"unreadable: {e}") from None


def _unpack_checked(data: bytes, kind: str, spec: Sequence[Tuple[str, str]]) -> Tuple[dict, Dict[str, array]]:
    if not data.startswith(MAGIC):
        raise CorruptIndex("no magic")
    pos = len(MAGIC)
    (hlen,) = struct.unpack_from("<Q", data, pos)
    pos += 8
    if pos + hlen > len(data):
        raise CorruptIndex("short header")
    header = json.loads(data[pos : pos + hlen])
    pos += hlen
    if header["format"] != FORMAT or header["byteorder"] != sys.byteorder or header["kind"] != kind:
        raise CorruptIndex("another format, kind or byte order")
    payload = data[pos:]
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise CorruptIndex("payload digest differs")
    specs = {name: (code, size, n) for name, code, size, n in header["arrays"]}
    arrays: Dict[str, array] = {}
    off = 0
    for name, code in spec:
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
    for values in header["strings"].values():
        if not isinstance(values, list) or not all(isinstance(s, str) for s in values):
            raise CorruptIndex("strings")
    return header, arrays


# -- an index (a whole image's, or one unit's part) -------------------------------------


def dumps(index: DwarfIndex, reads: Sequence[Tuple[str, int, int]] = (), read_digest: str = "") -> bytes:
    """The index as bytes, with the DWARF ranges it was read from and their digest."""
    meta = {"build_id": index.build_id, "image": index.image, "debug": index.debug,
            "reads": [list(r) for r in reads], "digest": read_digest}
    return _pack("index", meta, {"files": index.files, "names": index.names},
                 [(name, code, getattr(index, name)) for name, code in ARRAYS])


def loads(data: bytes) -> DwarfIndex:
    """The index in ``data``; CorruptIndex when anything about it is off."""
    return loads_with_reads(data)[0]


def loads_with_reads(data: bytes) -> Tuple[DwarfIndex, List[Tuple[str, int, int]], str]:
    header, arrays = _unpack(data, "index", ARRAYS)
    meta, strings = header["meta"], header["strings"]
    try:
        index = DwarfIndex(meta["build_id"], meta["image"], meta["debug"], strings["files"], strings["names"],
                           **arrays)
        reads = [(str(s), int(a), int(b)) for s, a, b in meta["reads"]]
        read_digest = str(meta["digest"])
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptIndex(f"header: {e}") from None
    check_bounds(index)
    return index, reads, read_digest


def check_bounds(index: DwarfIndex) -> None:
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
    for first, count, limit in (("sub_rng_first", "sub_rng_count", n), ("inl_rng_first", "inl_rng_count", n),
                                ("blk_rng_first", "blk_rng_count", n),
                                ("sub_inl_first", "sub_inl_count", len(index.inl_name)),
                                ("sub_blk_first", "sub_blk_count", len(index.blk_sub))):
        if any(f + c > limit for f, c in zip(getattr(index, first), getattr(index, count))):
            raise CorruptIndex(f"{first} past its table")
    groups = (("row_addr", "row_file", "row_line", "row_flags", "row_view"),
              ("sub_name", "sub_file", "sub_line", "sub_rng_first", "sub_rng_count", "sub_inl_first", "sub_inl_count",
               "sub_die", "sub_blk_first", "sub_blk_count"),
              ("inl_name", "inl_depth", "inl_call_file", "inl_call_line", "inl_rng_first", "inl_rng_count", "inl_sub",
               "inl_scope"),
              ("blk_scope", "blk_rng_first", "blk_rng_count", "blk_sub"),
              ("line_keys", "line_rows"), ("span_low", "span_high", "span_sub"))
    for group in groups:
        if len({len(getattr(index, a)) for a in group}) != 1:
            raise CorruptIndex(f"array lengths disagree ({group[0]})")
    if len(index.name_flags) != len(index.names):
        raise CorruptIndex("array lengths disagree (name_flags)")


def load(path: Path) -> Optional[DwarfIndex]:
    """The cached index at ``path`` whatever DWARF it was read from, or None when it is missing or damaged."""
    try:
        return loads(path.read_bytes())
    except (OSError, CorruptIndex):
        return None


def store(path: Path, index: DwarfIndex, reads: Sequence[Tuple[str, int, int]] = (), read_digest: str = "") -> None:
    write_bytes(path, dumps(index, reads, read_digest))


# -- the directory -----------------------------------------------------------------------


def dumps_directory(d: Directory, reads: Sequence[Tuple[str, int, int]], read_digest: str) -> bytes:
    return _pack("directory", {"reads": [list(r) for r in reads], "digest": read_digest}, {"strings": d.strings},
                 [(name, code, getattr(d, name)) for name, code in DIR_ARRAYS])


def loads_directory(data: bytes) -> Tuple[Directory, List[Tuple[str, int, int]], str]:
    header, arrays = _unpack(data, "directory", DIR_ARRAYS)
    try:
        d = Directory(header["strings"]["strings"], **arrays)
        reads = [(str(s), int(a), int(b)) for s, a, b in header["meta"]["reads"]]
        read_digest = str(header["meta"]["digest"])
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptIndex(f"header: {e}") from None
    n_units, n_strings = len(d.unit_offset), len(d.strings)
    if len({len(getattr(d, a)) for a in ("unit_offset", "unit_version", "unit_name", "unit_comp_dir", "unit_line",
                                         "unit_file_first", "unit_file_count")}) != 1 \
            or len(d.path_units_path) != len(d.path_units_unit) \
            or not len(d.span_low) == len(d.span_high) == len(d.span_unit):
        raise CorruptIndex("directory array lengths disagree")
    if any(v >= n_strings for v in (*d.unit_name, *d.unit_comp_dir, *d.file_path, *d.path_units_path)) \
            or any(u >= n_units for u in (*d.path_units_unit, *d.span_unit)) \
            or any(f + c > len(d.file_path) for f, c in zip(d.unit_file_first, d.unit_file_count)):
        raise CorruptIndex("a directory index points past its table")
    return d, reads, read_digest


# -- the source: what queries ask ------------------------------------------------------


def cache_key(build_id: Optional[str], sha256: str) -> str:
    return build_id if build_id else f"sha256-{sha256}"


def cache_path(key: str, cache_dir: Path = CACHE_DIR) -> Path:
    """The folder an image's entries are filed in."""
    return cache_dir / f"{key}.v{FORMAT}"


class DwarfSource:
    """The DWARF of one image, read and cached a unit at a time (see the module docstring)."""

    def __init__(self, img: KernelImage, dwarf_img: KernelImage, info: DebugInfo, cache_dir: Path = CACHE_DIR,
                 progress: bool = False):
        self.img = img
        self.info = info
        self.sections = Sections(dwarf_img)
        self.folder = cache_path(image_key(img), cache_dir)
        self.progress = progress
        self._code = [(s.addr, s.addr + s.size) for s in img.sections if s.executable]
        self._directory: Optional[Directory] = None
        self._reader: Optional[dwarfread.Reader] = None
        self._parts: Dict[Tuple[str, int], DwarfIndex] = {}
        self._digests: Dict[Tuple[str, int, int], bytes] = {}

    # -- the bytes an entry came from ----------------------------------------------------

    def _digest(self, ranges: Iterable[Tuple[str, int, int]], extra: bytes) -> str:
        """``sections.digest`` with each range's own digest kept: the whole ``.debug_str`` behind a thousand
        units' parts is hashed once."""
        h = hashlib.sha256(extra)
        for r in ranges:
            got = self._digests.get(r)
            if got is None:
                got = self._digests[r] = bytes.fromhex(digest(self.sections, [r]))
            h.update(got)
        return h.hexdigest()

    def _fresh(self, reads: Sequence[Tuple[str, int, int]], read_digest: str, extra: bytes) -> bool:
        try:
            return bool(reads) and self._digest(reads, extra) == read_digest
        except DwarfError:
            return False

    # -- the directory and the parts -------------------------------------------------------

    @property
    def directory(self) -> Directory:
        if self._directory is None:
            self._directory = self._guarded(self._load_directory)
        return self._directory

    def _load_directory(self) -> Directory:
        path = self.folder / "units.dir"
        try:
            d, reads, read_digest = loads_directory(path.read_bytes())
            if self._fresh(reads, read_digest, b"directory"):
                return d
        except (OSError, CorruptIndex):
            pass
        rec = Reads()
        report = self._reporter("reading the unit directory") if self.progress else None
        d = dwarfdir.build(self.sections, rec, report)
        if report is not None:
            sys.stderr.write("\n")
        ranges = rec.merged()
        write_bytes(path, dumps_directory(d, ranges, self._digest(ranges, b"directory")))
        return d

    @property
    def reader(self) -> dwarfread.Reader:
        if self._reader is None:
            self._reader = dwarfread.Reader(self.sections, self.directory, self._code)
        return self._reader

    def part(self, kind: str, ui: int) -> DwarfIndex:
        """Unit ``ui``'s lines (``kind`` "lines") or DIEs ("dies"), from the cache or read and cached."""
        key = (kind, ui)
        got = self._parts.get(key)
        if got is not None:
            return got
        offset = self.directory.unit_offset[ui]
        extra = f"{kind} {offset}".encode() + self.reader.code_key()
        path = self.folder / f"{offset:x}.{kind}"
        part = None
        try:
            part, reads, read_digest = loads_with_reads(path.read_bytes())
            if not self._fresh(reads, read_digest, extra):
                part = None
        except (OSError, CorruptIndex):
            part = None
        if part is None:
            rec = Reads()
            build = dwarfread.line_part if kind == "lines" else dwarfread.die_part
            part = self._guarded(lambda: build(self.reader, ui, rec))
            ranges = rec.merged()
            store(path, part, ranges, self._digest(ranges, extra))
        self._parts[key] = part
        return part

    def _guarded(self, work):
        """Malformed DWARF found while reading is one line naming the file."""
        try:
            return work()
        except _BAD_DWARF as e:
            detail = " ".join(str(e).split()) or type(e).__name__
            if not isinstance(e, DwarfError):
                detail = f"{type(e).__name__}: {detail}" if str(e) else type(e).__name__
            raise UserError(f"{self.sections.path}: corrupt or unsupported DWARF ({detail}); "
                            "re-copy the debug file or rebuild it") from None

    def _reporter(self, what: str):
        path = self.sections.path

        def report(done: int, total: int) -> None:
            sys.stderr.write(f"\r{what} of {path} (once; cached): {100 * done // max(total, 1)}%")
            sys.stderr.flush()

        return report

    def index(self, units: Sequence[int], lines: bool = True, dies: bool = True,
              line_units: Optional[Sequence[int]] = None) -> DwarfIndex:
        """One index of ``units``' parts (lines of ``line_units`` when given, else of ``units``)."""
        parts = []
        todo = [(k, u) for u in (units if line_units is None else line_units) if lines for k in ("lines",)]
        todo += [("dies", u) for u in units if dies]
        show = self.progress and sum(1 for k in todo if k not in self._parts) > 8
        for n, (kind, u) in enumerate(todo):
            parts.append(self.part(kind, u))
            if show:
                sys.stderr.write(f"\rreading the DWARF of {self.sections.path} (once; cached): "
                                 f"{n + 1}/{len(todo)} unit parts")
                sys.stderr.flush()
        if show:
            sys.stderr.write("\n")
        rd = self.reader
        return dwarfread.merge(parts, self.img.build_id or "", self.img.path, self.info.path, rd.in_code)

    # -- queries ------------------------------------------------------------------------

    def for_all(self, lines: bool = True, dies: bool = True) -> DwarfIndex:
        """Every unit: what ``--inline`` needs (a function is inlined anywhere), and the oracle tests."""
        return self.index(range(len(self.directory.unit_offset)), lines, dies)

    def for_line(self, file: str, line: int) -> DwarfIndex:
        """Every unit whose file table names a file ``file`` matches: their lines, and the DIEs of those with
        rows of ``line``.  No matching file at all is the one-line error with the nearest names."""
        d = self.directory
        paths = d.paths_matching(file)
        if not paths:
            raise UserError(f"{self.img.path}: no source file '{file}' has code in the line table"
                            f"{_similar(d, file)}")
        units = d.units_naming(paths)
        names = {d.strings[p] for p in paths}
        with_line = [u for u in units if _has_line(self.part("lines", u), names, line)]
        return self.index(with_line, line_units=units)

    def variables(self, index: DwarfIndex):
        """A reader of the variables at the addresses of ``index``'s subprograms (``variables``)."""
        from .variables import VariableReader
        from ..image.dwarf.cfi import frame_tables

        image = self.sections if self.sections.path == self.img.path else Sections(self.img)
        frames = self._guarded(lambda: frame_tables((self.sections, ".debug_frame"), (image, ".eh_frame")))
        return GuardedVariables(VariableReader(index, self.reader.units, frames, self.img.isa), self._guarded)

    def for_range(self, low: int, high: int) -> DwarfIndex:
        """The units whose code overlaps ``[low, high)`` (a function: ``--lines``, ``--vars``)."""
        units = self.directory.units_in(low, high)
        return self.index(units)


class GuardedVariables:
    """A ``VariableReader`` whose malformed DWARF is the one-line error."""

    def __init__(self, reader, guard):
        self.reader = reader
        self._guard = guard

    def at(self, address: int):
        return self._guard(lambda: self.reader.at(address))

    def reading(self, variables, spec: str):
        return self._guard(lambda: self.reader.reading(variables, spec))

    def read(self, variable):
        return self._guard(lambda: self.reader.read(variable))


def _has_line(part: DwarfIndex, paths: set, line: int) -> bool:
    for fid, path in enumerate(part.files):
        if path in paths and part.rows_of_line(fid, line):
            return True
    return False


def _similar(d: Directory, file: str) -> str:
    import difflib
    import os

    base = os.path.basename(file)
    paths = [d.strings[p] for p in d.paths()]
    near = [p for p in paths if base and base in os.path.basename(p)]
    names = sorted({os.path.basename(p) for p in paths})
    close = set(difflib.get_close_matches(base, names, n=3))
    near += [p for p in paths if os.path.basename(p) in close]
    near = sorted(set(near))[:5]
    return f"; similar: {', '.join(near)}" if near else ""


def open_source(img: KernelImage, debug: Optional[str] = None, roots: Sequence[str] = DEFAULT_ROOTS,
                progress: bool = False, cache_dir: Path = CACHE_DIR) -> DwarfSource:
    """The DWARF of ``img``, located (and checked against the image) every time: a stale ``--debug`` file is an
    error whether or not anything is cached, and a stripped image takes the debug file's symbols."""
    if img.e_type == "ET_REL":
        raise UserError(f"{img.path}: source lines and inlined copies are read from linked images (a kernel, a "
                        "shared object); the DWARF of a relocatable module is not supported")
    info = locate(img, debug, roots)
    dbg = open_debug(img, info)
    return DwarfSource(img, dbg, info, cache_dir, progress)


def open_index(img: KernelImage, debug: Optional[str] = None, roots: Sequence[str] = DEFAULT_ROOTS,
               progress: bool = False, cache_dir: Path = CACHE_DIR) -> Tuple[DwarfIndex, DebugInfo]:
    """The index of every unit of ``img`` (see ``open_source``)."""
    src = open_source(img, debug, roots, progress, cache_dir)
    return src.for_all(), src.info
