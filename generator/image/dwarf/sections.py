"""The DWARF sections of one file, read in place, and a record of which of their bytes a result came from.

A kernel's ``.debug_info`` is hundreds of MB: it is never copied whole.
Each section is a view of the file's mapping (``KernelImage.section_view``);
a compressed section (``SHF_COMPRESSED``, zlib) is inflated once.  Readers
take the bytes of one unit, one line program or one list at a time.

``Reads`` names the byte ranges a result was computed from.  A cached result
is kept with the digest of those bytes and used again only while the same
ranges of the file give the same digest: a copy of the file corrupted (or
patched) anywhere the result was read from is read again, although its
build-id is the same, and damage anywhere else cannot change the result.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from typing import Dict, List, Optional, Sequence, Tuple

from ..elf import KernelImage

SHF_COMPRESSED = 0x800
ELFCOMPRESS_ZLIB = 1

# Every section the reader may touch, in a fixed order (the digest walks them in it).
SECTION_NAMES: Tuple[str, ...] = (
    ".debug_info", ".debug_abbrev", ".debug_line", ".debug_str", ".debug_line_str", ".debug_str_offsets",
    ".debug_addr", ".debug_ranges", ".debug_rnglists", ".debug_loc", ".debug_loclists", ".debug_aranges",
    ".debug_frame", ".eh_frame", ".eh_frame_hdr",
)


class DwarfError(Exception):
    """Malformed DWARF, said in plain words: the section, the offset, what is wrong."""


class Sections:
    """The DWARF sections of one file (see the module docstring)."""

    def __init__(self, img: KernelImage):
        self.path = img.path
        self.img = img
        self._data: Dict[str, object] = {}
        self._strings: Dict[Tuple[str, int], str] = {}

    def has(self, name: str) -> bool:
        return len(self.get(name)) > 0

    def get(self, name: str):
        """The section's bytes (a memoryview of the mapping, or inflated bytes); empty when it is absent."""
        got = self._data.get(name)
        if got is None:
            got = self._load(name)
            self._data[name] = got
        return got

    def address(self, name: str) -> int:
        """The section's ``sh_addr`` (``.eh_frame``'s pc-relative pointers need it); 0 when unallocated."""
        for s in self.img.sections:
            if s.name == name:
                return s.addr
        return 0

    def _load(self, name: str):
        view = self.img.section_view(name)
        if view is None:
            return b""
        data, flags = view
        if not flags & SHF_COMPRESSED:
            return data
        if len(data) < 24:
            raise DwarfError(f"{name}: compressed section shorter than its header")
        ch_type, _, ch_size, _ = struct.unpack_from("<IIQQ", data, 0)
        if ch_type != ELFCOMPRESS_ZLIB:
            raise DwarfError(f"{name}: compressed with ELF compression type {ch_type}; only zlib (1) is read "
                             "(decompress it with objcopy --decompress-debug-sections)")
        try:
            out = zlib.decompress(bytes(data[24:]))
        except zlib.error as e:
            raise DwarfError(f"{name}: its zlib data is corrupt ({e})") from None
        if len(out) != ch_size:
            raise DwarfError(f"{name}: inflates to {len(out)} bytes, its header says {ch_size}")
        return out

    def chunk(self, name: str, start: int, end: int) -> bytes:
        """``[start, end)`` of a section as bytes; an error when it does not lie inside the section."""
        data = self.get(name)
        if not 0 <= start <= end <= len(data):
            raise DwarfError(f"{name}: [{start:#x}, {end:#x}) lies outside the section ({len(data):#x} bytes)")
        return bytes(data[start:end])

    def whole(self, name: str) -> bytes:
        """A small section (strings, string offsets) as bytes, copied once."""
        key = ("whole", name)
        got = self._data.get(key)  # type: ignore[call-overload]
        if got is None:
            got = bytes(self.get(name))
            self._data[key] = got  # type: ignore[index]
        return got

    def string(self, name: str, offset: int) -> str:
        """The NUL-terminated string at ``offset`` of a string section."""
        key = (name, offset)
        got = self._strings.get(key)
        if got is not None:
            return got
        data = self.whole(name)
        if not 0 <= offset < len(data):
            raise DwarfError(f"{name}: string offset {offset:#x} lies outside the section ({len(data):#x} bytes)")
        end = data.find(b"\0", offset)
        if end < 0:
            raise DwarfError(f"{name}: the string at {offset:#x} has no terminating NUL")
        text = data[offset:end].decode("utf-8", "surrogateescape")
        self._strings[key] = text
        return text


class Reads:
    """Byte ranges of the sections a result was read from (see the module docstring).

    Ranges are kept as given (a unit, a line program, a whole small section),
    merged per section when the digest is taken.
    """

    def __init__(self) -> None:
        self.ranges: Dict[str, List[Tuple[int, int]]] = {}

    def add(self, section: str, start: int, end: int) -> None:
        self.ranges.setdefault(section, []).append((start, end))

    def whole(self, section: str) -> None:
        self.add(section, 0, -1)

    def merged(self) -> List[Tuple[str, int, int]]:
        """(section, start, end) in section order, overlapping ranges joined; end -1 is the section's end."""
        out: List[Tuple[str, int, int]] = []
        for name in SECTION_NAMES:
            spans = self.ranges.get(name)
            if not spans:
                continue
            if any(e == -1 for _, e in spans):
                out.append((name, 0, -1))
                continue
            spans = sorted(spans)
            lo, hi = spans[0]
            for a, b in spans[1:]:
                if a <= hi:
                    hi = max(hi, b)
                else:
                    out.append((name, lo, hi))
                    lo, hi = a, b
            out.append((name, lo, hi))
        return out


def digest(sections: Sections, ranges: Sequence[Tuple[str, int, int]], extra: bytes = b"") -> str:
    """The SHA-256 of ``ranges`` of the sections (names and bounds included) and ``extra``; bytes past a
    section's end count as missing, so a truncated file gives another digest."""
    h = hashlib.sha256(extra)
    for name, start, end in ranges:
        data = sections.get(name)
        stop = len(data) if end == -1 else end
        h.update(struct.pack("<16sQQQ", name.encode()[:16], start, end & 0xFFFFFFFFFFFFFFFF, len(data)))
        if 0 <= start <= stop <= len(data):
            h.update(data[start:stop])
        else:
            h.update(b"\xffmissing")
    return h.hexdigest()


def image_key(img: KernelImage) -> str:
    """The name a cache entry of this image's DWARF is filed under: its build-id, else a digest of its
    headers.  Only a name: whether an entry may be used is decided by ``digest`` over the bytes it was read
    from."""
    return img.build_id or f"headers-{img.section_headers_digest()[:40]}"


def optional_string(sections: Sections, name: str, offset: Optional[int]) -> Optional[str]:
    return None if offset is None else sections.string(name, offset)


def initial_length(data, offset: int, where: str) -> Tuple[int, int, int]:
    """A unit's or line program's initial length at ``offset`` (7.4: 32-bit, or 0xffffffff and 64-bit): (the
    offset one past the unit, where its header goes on, its offset size); a DwarfError when the unit cannot be
    in the section."""
    n = len(data)
    if not 0 <= offset or offset + 4 > n:
        raise DwarfError(f"{where} starts past the section's end ({n:#x})")
    length = struct.unpack_from("<I", data, offset)[0]
    pos = offset + 4
    offset_size = 4
    if length == 0xFFFFFFFF:
        if pos + 8 > n:
            raise DwarfError(f"{where}: truncated header")
        length = struct.unpack_from("<Q", data, pos)[0]
        pos += 8
        offset_size = 8
    elif length >= 0xFFFFFFF0:
        raise DwarfError(f"{where} has the reserved length {length:#x}")
    end = pos + length
    if end > n:
        raise DwarfError(f"{where} says it is {length} bytes long, past the section's end ({n:#x})")
    return end, pos, offset_size
