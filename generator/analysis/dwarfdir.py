"""The unit directory of an image's DWARF: what a query reads before deciding which units to decode.

gdb answers ``break FILE:LINE`` on a kernel in seconds because it first
reads only each compilation unit's line-table header (its file table) and
decodes in full just the units whose file table names FILE; llvm-symbolizer
finds the unit of an address through ``.debug_aranges``.  The directory is
that first pass, done once per image and cached (``indexcache``):

- every compilation unit: its offset, DWARF version, name, compilation
  directory and line program offset;
- its line program's file table, as paths (joined and normalised as
  LLVM's symbolizer joins them, and as ``dwarfread`` names rows);
- which units name each path, for ``FILE:LINE``;
- which unit's code covers each address range (``.debug_aranges``, else the
  unit DIE's own ``DW_AT_low_pc``/``DW_AT_high_pc``/``DW_AT_ranges``), for
  ``--function`` and ``--vars``.

Reading it touches each unit's header and first DIE, the start of each
abbreviation table, each line program's header and ``.debug_aranges``:
a few MB of a kernel's 600.  ``reads`` names those bytes for the cache.
"""

from __future__ import annotations

import bisect
import posixpath
from array import array
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..image.dwarf import spec as S
from ..image.dwarf.aranges import aranges
from ..image.dwarf.lineprog import LineHeader, header, join_path
from ..image.dwarf.lists import ranges as range_list
from ..image.dwarf.sections import DwarfError, Reads, Sections
from ..image.dwarf.units import Abbrev, Unit, abbrev_entry, uleb, unit_headers
from .dwarfindex import span_at

NO_LINES = 0xFFFFFFFFFFFFFFFF  # a unit without a line program

# The directory's arrays: name and typecode.
DIR_ARRAYS: Tuple[Tuple[str, str], ...] = (
    ("unit_offset", "Q"), ("unit_version", "B"), ("unit_name", "I"), ("unit_comp_dir", "I"), ("unit_line", "Q"),
    ("unit_file_first", "I"), ("unit_file_count", "I"), ("file_path", "I"),
    ("path_units_path", "I"), ("path_units_unit", "I"),
    ("span_low", "Q"), ("span_high", "Q"), ("span_unit", "I"),
)


@dataclass
class Directory:
    """The unit directory of one image (see the module docstring)."""

    strings: List[str]  # unit names, compilation directories and file paths
    unit_offset: array  # .debug_info offset of each compilation unit
    unit_version: array
    unit_name: array  # into strings
    unit_comp_dir: array
    unit_line: array  # .debug_line offset of its program, NO_LINES when it has none
    unit_file_first: array  # its file table: file_path[first:first + count], by file number - file base
    unit_file_count: array
    file_path: array  # into strings
    path_units_path: array  # (path, unit) pairs sorted by path, unit: which units name a path
    path_units_unit: array
    span_low: array  # address ranges by low address, with the unit covering each
    span_high: array
    span_unit: array

    def __post_init__(self) -> None:
        self._paths: Optional[List[int]] = None

    def units_naming(self, path_ids: Sequence[int]) -> List[int]:
        """The units whose file table names any of ``path_ids``, ascending."""
        out = set()
        keys = self.path_units_path
        for pid in path_ids:
            lo = bisect.bisect_left(keys, pid)
            hi = bisect.bisect_right(keys, pid)
            out.update(self.path_units_unit[k] for k in range(lo, hi))
        return sorted(out)

    def paths(self) -> List[int]:
        """Every string that is some unit's file path."""
        if self._paths is None:
            self._paths = sorted(set(self.path_units_path))
        return self._paths

    def paths_matching(self, suffix: str) -> List[int]:
        """The file paths that are ``suffix`` or end with ``/suffix`` (whole path components)."""
        suffix = posixpath.normpath(suffix)
        tail = "/" + suffix
        return [p for p in self.paths() if self.strings[p] == suffix or self.strings[p].endswith(tail)]

    def unit_at(self, address: int) -> Optional[int]:
        """The unit whose code covers ``address``."""
        return span_at(self.span_low, self.span_high, self.span_unit, address)

    def units_in(self, low: int, high: int) -> List[int]:
        """The units whose code overlaps ``[low, high)``."""
        out = set()
        i = max(bisect.bisect_right(self.span_low, low) - 1, 0)
        n = len(self.span_low)
        while i < n and self.span_low[i] < high:
            if self.span_high[i] > low:
                out.add(self.span_unit[i])
            i += 1
        return sorted(out)

    def counts(self) -> Dict[str, int]:
        return {"units": len(self.unit_offset), "paths": len(self.paths()), "file_entries": len(self.file_path)}


Progress = Callable[[int, int], None]


class _Strings:
    def __init__(self) -> None:
        self.items: List[str] = []
        self.ids: Dict[str, int] = {}

    def id(self, s: str) -> int:
        got = self.ids.get(s)
        if got is None:
            got = self.ids[s] = len(self.items)
            self.items.append(s)
        return got


def build(sections: Sections, reads: Reads, progress: Optional[Progress] = None) -> Directory:
    """Read the directory of ``sections``' DWARF (see the module docstring)."""
    info = sections.get(".debug_info")
    abbrev = sections.get(".debug_abbrev")
    strings = _Strings()
    A: Dict[str, array] = {name: array(code) for name, code in DIR_ARRAYS}
    joined: Dict[Tuple[str, str, str, bool], int] = {}
    pairs: List[Tuple[int, int]] = []
    own_spans: List[Tuple[int, int, int]] = []
    by_offset: Dict[int, int] = {}
    total = len(info)
    for h in unit_headers(info):
        reads.add(".debug_info", h.offset, h.offset + h.die_start)
        if h.unit_type not in (S.DW_UT_compile, S.DW_UT_partial):
            continue
        top = _top_die(sections, h, abbrev, reads)
        if top is None:
            continue
        unit, attrs = top
        if unit.version >= 5 and S.DW_AT_str_offsets_base in attrs:
            unit.str_offsets_base = attrs[S.DW_AT_str_offsets_base][1]
        if S.DW_AT_addr_base in attrs:
            unit.addr_base = attrs[S.DW_AT_addr_base][1]
        if S.DW_AT_rnglists_base in attrs:
            unit.rnglists_base = attrs[S.DW_AT_rnglists_base][1]
        if S.DW_AT_low_pc in attrs:
            unit.low_pc = unit.address(*attrs[S.DW_AT_low_pc], reads)
        ui = len(A["unit_offset"])
        by_offset[h.offset] = ui
        name = _string(unit, attrs, S.DW_AT_name, reads)
        comp_dir = _string(unit, attrs, S.DW_AT_comp_dir, reads)
        A["unit_offset"].append(h.offset)
        A["unit_version"].append(h.version)
        A["unit_name"].append(strings.id(name))
        A["unit_comp_dir"].append(strings.id(comp_dir))
        A["unit_file_first"].append(len(A["file_path"]))
        line = attrs.get(S.DW_AT_stmt_list)
        if line is not None and isinstance(line[1], int):
            lh = header(sections, line[1], reads)
            A["unit_line"].append(line[1])
            for entry in lh.files:
                d = entry.dir_index if lh.version >= 5 else entry.dir_index - 1
                key = (comp_dir, lh.dirs[d] if 0 <= d < len(lh.dirs) else "", entry.name,
                       lh.version >= 5 and d == 0)
                pid = joined.get(key)
                if pid is None:
                    pid = joined[key] = strings.id(_path(lh, comp_dir, entry))
                A["file_path"].append(pid)
                pairs.append((pid, ui))
            A["unit_file_count"].append(len(lh.files))
        else:
            A["unit_line"].append(NO_LINES)
            A["unit_file_count"].append(0)
        own_spans += [(lo, hi, ui) for lo, hi in _unit_ranges(unit, attrs, reads) if lo < hi]
        if progress is not None:
            progress(h.offset + h.end, total)
    # .debug_aranges where it names a unit (gcc writes a set per unit; an assembler's unit may be the only one
    # clang's output has), the unit DIE's own ranges for the others.
    spans = [(lo, hi, by_offset[u]) for lo, hi, u in aranges(sections, reads) if u in by_offset]
    listed = {u for _, _, u in spans}
    spans += [s for s in own_spans if s[2] not in listed]
    spans.sort()
    for lo, hi, u in spans:
        A["span_low"].append(lo)
        A["span_high"].append(hi)
        A["span_unit"].append(u)
    for pid, ui in sorted(set(pairs)):
        A["path_units_path"].append(pid)
        A["path_units_unit"].append(ui)
    return Directory(strings.items, **A)


def _path(h: LineHeader, comp_dir: str, entry) -> str:
    return join_path(h, comp_dir, entry, posixpath)


def _string(unit: Unit, attrs, at: int, reads: Reads) -> str:
    got = attrs.get(at)
    if got is None:
        return ""
    return unit.string(got[0], got[1], reads)


def _unit_ranges(unit: Unit, attrs, reads: Reads) -> List[Tuple[int, int]]:
    if S.DW_AT_ranges in attrs:
        form, value = attrs[S.DW_AT_ranges]
        return range_list(unit, form, value, reads)
    low, high = attrs.get(S.DW_AT_low_pc), attrs.get(S.DW_AT_high_pc)
    if low is None or high is None:
        return []
    lo = unit.address(low[0], low[1], reads)
    hi = lo + high[1] if high[0] in S.CONSTANTS else unit.address(high[0], high[1], reads)
    return [(lo, hi)]


def _top_die(sections: Sections, h, abbrev_data, reads: Reads):
    """The unit DIE of unit ``h``, read without reading the unit's other DIEs or its whole abbreviation table:
    (a Unit over the DIE's bytes, {attribute: (form, value)}), or None for a unit with no DIE."""
    info = sections.get(".debug_info")
    start = h.offset + h.die_start
    end = h.offset + h.end
    if start >= end:
        return None
    window = 512
    while True:
        stop = min(end, start + window)
        data = bytes(info[h.offset:stop])
        code, _ = uleb(data, h.die_start) if h.die_start < len(data) else (0, 0)
        if code == 0:
            return None
        ab, abbrev_end = _find_abbrev(abbrev_data, h.abbrev_offset, code)
        unit = Unit(sections, h.offset, h, data, {code: ab})
        try:
            ab2, attrs, after = unit.die(start)
        except DwarfError:
            if stop == end:
                raise
            window *= 8
            continue
        reads.add(".debug_info", start, after)
        reads.add(".debug_abbrev", h.abbrev_offset, abbrev_end)
        return unit, attrs


def _find_abbrev(data, offset: int, code: int) -> Tuple[Abbrev, int]:
    """Abbreviation ``code`` of the table at ``offset``, scanning only up to it; and where its entry ends."""
    pos = offset
    n = len(data)
    if not 0 <= offset < n:
        raise DwarfError(f".debug_abbrev: table offset {offset:#x} lies outside the section")
    try:
        for _ in range(1 << 20):
            c, ab, pos = abbrev_entry(data, pos, offset)
            if ab is None:
                break
            if c == code:
                return ab, pos
    except IndexError:
        raise DwarfError(f".debug_abbrev: the table at {offset:#x} runs past the section's end") from None
    raise DwarfError(f".debug_abbrev: the table at {offset:#x} does not define abbreviation {code}, which a unit's "
                     "first DIE uses")
