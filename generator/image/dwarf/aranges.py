"""``.debug_aranges`` (DWARF 6.1.2): which unit's code covers which addresses, without reading the units.

gcc writes one set per compilation unit; a query for an address (a
function's, a probe site's) finds its unit here by a binary search, as gdb
and llvm-symbolizer do, instead of reading every unit's DIEs.
"""

from __future__ import annotations

import struct
from typing import List, Tuple

from .sections import DwarfError, Reads, Sections

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from


def aranges(sections: Sections, reads: Reads) -> List[Tuple[int, int, int]]:
    """Every (low, high, unit offset) of ``.debug_aranges``, empty ranges left out; [] when there is none."""
    data = sections.get(".debug_aranges")
    if not len(data):
        return []
    reads.whole(".debug_aranges")
    out: List[Tuple[int, int, int]] = []
    pos = 0
    n = len(data)
    try:
        while pos < n:
            start = pos
            length = _U32(data, pos)[0]
            pos += 4
            offset_size = 4
            if length == 0xFFFFFFFF:
                length = _U64(data, pos)[0]
                pos += 8
                offset_size = 8
            end = pos + length
            if end > n or length < 4:
                raise DwarfError(f".debug_aranges: the set at {start:#x} runs past the section's end")
            version = _U16(data, pos)[0]
            if version != 2:
                raise DwarfError(f".debug_aranges: the set at {start:#x} has version {version}; 2 is read")
            pos += 2
            unit = (_U32 if offset_size == 4 else _U64)(data, pos)[0]
            pos += offset_size
            addr_size, seg_size = data[pos], data[pos + 1]
            pos += 2
            if addr_size not in (4, 8) or seg_size != 0:
                raise DwarfError(f".debug_aranges: the set at {start:#x} has address size {addr_size} and segment "
                                 f"size {seg_size}; 4 or 8 and 0 are read")
            tup = 2 * addr_size
            pos = start + ((pos - start + tup - 1) // tup) * tup
            read = _U64 if addr_size == 8 else _U32
            while pos + tup <= end:
                lo = read(data, pos)[0]
                size = read(data, pos + addr_size)[0]
                pos += tup
                if lo == 0 and size == 0:
                    break
                if size:
                    out.append((lo, lo + size, unit))
            pos = end
    except (IndexError, struct.error):
        raise DwarfError(".debug_aranges: a set runs past the section's end") from None
    out.sort()
    return out
