"""The line and inline index of one image: what source-line and inline-function probes are looked up in.

An image's DWARF is large, so the facts the probe modes need are read once
per compilation unit (``dwarfread``), cached (``indexcache``), and joined
into this index of flat arrays for the units a query can match; every
question is then a few binary searches:

- line rows, in address order: the address where each row starts, its
  file, line and ``is_stmt``; an END row closes each sequence.  Rows that
  own no bytes (a later row starts at the same address: the row's "views")
  are kept, for gdb breaks on them; the row covering an address is the last
  one at or below it, as in every DWARF consumer;
- the same rows ordered by (file, line, address), for ``FILE:LINE``;
- concrete subprograms (functions with code: out-of-line definitions, and
  out-of-line instances of inline functions), each with its ranges as the
  DWARF lists them and its inlined copies;
- inlined copies (``DW_TAG_inlined_subroutine``): the inline function's
  name, nesting depth, call site, and ranges as listed (the first listed
  range holds the entry, as kinst's inline tracing takes it);
- the lexical blocks that declare a name, with their ranges: with the
  inlined copies and the subprograms, the blocks gdb's ``break`` keeps one
  location per.

Addresses are the image's link-time addresses; code the linker discarded
(DWARF left at address 0 or a tombstone) is not indexed.
"""

from __future__ import annotations

import bisect
import posixpath
from array import array
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

NO_FILE = 0xFFFFFFFF  # the file of an END row
FLAG_STMT = 1  # row flag: is_stmt
FLAG_END = 2  # row flag: end of a sequence (the address is one past its last byte)
NAME_INLINE = 1  # name flag: some DIE of this name has DW_AT_inline
NAME_DECLARED = 2  # name flag: some subprogram DIE has this name

# Every array of the index: its name and typecode ('Q' addresses and keys, 'I' indices, 'B' flags).
ARRAYS: Tuple[Tuple[str, str], ...] = (
    ("row_addr", "Q"), ("row_file", "I"), ("row_line", "I"), ("row_flags", "B"), ("row_view", "H"),
    ("line_rows", "I"), ("line_keys", "Q"),
    ("sub_name", "I"), ("sub_file", "I"), ("sub_line", "I"),
    ("sub_rng_first", "I"), ("sub_rng_count", "I"), ("sub_inl_first", "I"), ("sub_inl_count", "I"),
    ("span_low", "Q"), ("span_high", "Q"), ("span_sub", "I"),
    ("inl_name", "I"), ("inl_depth", "I"), ("inl_call_file", "I"), ("inl_call_line", "I"),
    ("inl_rng_first", "I"), ("inl_rng_count", "I"), ("inl_sub", "I"),
    ("rng_low", "Q"), ("rng_high", "Q"),
    ("name_flags", "B"),
    ("sub_die", "Q"), ("sub_blk_first", "I"), ("sub_blk_count", "I"), ("inl_scope", "I"),
    ("blk_scope", "I"), ("blk_rng_first", "I"), ("blk_rng_count", "I"), ("blk_sub", "I"),
)


SPAN_LOOKBACK = 8  # spans sorted by start may nest: look this many back for one that still covers


def span_at(low, high, values, address: int) -> Optional[int]:
    """``values[j]`` of the span ``[low[j], high[j])`` that holds ``address``, the latest-starting one;
    None when none of the last SPAN_LOOKBACK spans starting at or before it does."""
    i = bisect.bisect_right(low, address) - 1
    for j in range(i, max(i - SPAN_LOOKBACK, -1), -1):
        if low[j] <= address < high[j]:
            return values[j]
    return None


@dataclass
class DwarfIndex:
    """The index of some or all units of one image (see the module docstring).  Joined by ``dwarfread.merge``
    from parts ``indexcache`` keeps; never changed after that."""

    build_id: str
    image: str  # the image it was built for (informational: the cache is keyed by build-id)
    debug: str  # the file its DWARF came from
    files: List[str]  # normalised source paths
    names: List[str]  # function names
    row_addr: array
    row_file: array
    row_line: array
    row_flags: array
    row_view: array  # the row's view at its address (DWARF 5 location views; 0 where the address advances)
    line_rows: array  # row indices by (file, line, address)
    line_keys: array  # file << 32 | line of each, for bisect
    sub_name: array
    sub_file: array  # DW_AT_decl_file (NO_FILE when unknown)
    sub_line: array
    sub_rng_first: array
    sub_rng_count: array
    sub_inl_first: array
    sub_inl_count: array
    span_low: array  # every range of every subprogram, by address
    span_high: array
    span_sub: array
    inl_name: array
    inl_depth: array  # 0: directly in the subprogram
    inl_call_file: array  # NO_FILE when unknown
    inl_call_line: array
    inl_rng_first: array
    inl_rng_count: array
    inl_sub: array
    rng_low: array
    rng_high: array
    name_flags: array
    sub_die: array  # .debug_info offset of the subprogram's DIE (its variables are read from there)
    sub_blk_first: array  # its lexical blocks that declare something: blk_*[first:first + count]
    sub_blk_count: array
    inl_scope: array  # nesting among the subprogram's scopes (inlined copies and lexical blocks); 0: directly in it
    blk_scope: array
    blk_rng_first: array
    blk_rng_count: array
    blk_sub: array

    def __post_init__(self) -> None:
        self._by_name: Optional[Dict[str, int]] = None

    # -- lines --------------------------------------------------------------

    def row_at(self, address: int) -> Optional[int]:
        """The row covering ``address`` (the last of the rows that start there), or None when no line-table
        sequence does."""
        i = bisect.bisect_right(self.row_addr, address) - 1
        if i < 0 or self.row_flags[i] & FLAG_END:
            return None
        return i

    def row_end(self, row: int) -> int:
        """One past the last byte of ``row``: where the next row (or the END of its sequence) starts."""
        return self.row_addr[row + 1]

    def line_of(self, address: int) -> Optional[Tuple[str, int, bool]]:
        """(file, line, is_stmt) of the row covering ``address``."""
        r = self.row_at(address)
        if r is None:
            return None
        return self.files[self.row_file[r]], self.row_line[r], bool(self.row_flags[r] & FLAG_STMT)

    def rows_of_line(self, file: int, line: int) -> List[int]:
        """Every row of ``file``:``line``, by address."""
        key = file << 32 | line
        lo = bisect.bisect_left(self.line_keys, key)
        hi = bisect.bisect_right(self.line_keys, key)
        return [self.line_rows[k] for k in range(lo, hi)]

    def lines_of_file(self, file: int) -> List[int]:
        """The lines of ``file`` that have code, ascending."""
        lo = bisect.bisect_left(self.line_keys, file << 32)
        hi = bisect.bisect_left(self.line_keys, (file + 1) << 32)
        out: List[int] = []
        for k in range(lo, hi):
            line = self.line_keys[k] & 0xFFFFFFFF
            if not out or out[-1] != line:
                out.append(line)
        return out

    def rows_between(self, low: int, high: int) -> Iterator[int]:
        """The rows that start in ``[low, high)``, END rows left out, by address."""
        i = max(bisect.bisect_left(self.row_addr, low), 0)
        first = self.row_at(low)
        if first is not None and first < i:
            i = first
        n = len(self.row_addr)
        while i < n and self.row_addr[i] < high:
            if not self.row_flags[i] & FLAG_END:
                yield i
            i += 1

    def files_matching(self, suffix: str) -> List[int]:
        """The files that have code and whose path is ``suffix`` or ends with ``/suffix``."""
        suffix = posixpath.normpath(suffix)
        out = []
        for i, path in enumerate(self.files):
            if (path == suffix or path.endswith("/" + suffix)) and self.has_code(i):
                out.append(i)
        return out

    def has_code(self, file: int) -> bool:
        """True when some row of ``file`` has a line."""
        k = bisect.bisect_left(self.line_keys, file << 32)
        return k < len(self.line_keys) and self.line_keys[k] >> 32 == file

    # -- functions and inlined copies ---------------------------------------

    def sub_at(self, address: int) -> Optional[int]:
        """The concrete subprogram whose ranges hold ``address``."""
        return span_at(self.span_low, self.span_high, self.span_sub, address)

    def ranges_of_sub(self, sub: int) -> List[Tuple[int, int]]:
        first = self.sub_rng_first[sub]
        return [(self.rng_low[k], self.rng_high[k]) for k in range(first, first + self.sub_rng_count[sub])]

    def ranges_of_inline(self, inl: int) -> List[Tuple[int, int]]:
        first = self.inl_rng_first[inl]
        return [(self.rng_low[k], self.rng_high[k]) for k in range(first, first + self.inl_rng_count[inl])]

    def inline_chain(self, address: int) -> List[int]:
        """The inlined copies whose ranges hold ``address``, innermost first."""
        sub = self.sub_at(address)
        if sub is None:
            return []
        first = self.sub_inl_first[sub]
        hits = []
        for inl in range(first, first + self.sub_inl_count[sub]):
            r0 = self.inl_rng_first[inl]
            for k in range(r0, r0 + self.inl_rng_count[inl]):
                if self.rng_low[k] <= address < self.rng_high[k]:
                    hits.append(inl)
                    break
        hits.sort(key=lambda i: -self.inl_depth[i])
        return hits

    def block_at(self, address: int) -> Optional[Tuple[str, int]]:
        """The innermost of gdb's blocks holding ``address``: ("inl", copy), ("blk", lexical block that
        declares something) or ("sub", subprogram); None outside every subprogram."""
        sub = self.sub_at(address)
        if sub is None:
            return None
        best: Tuple[str, int] = ("sub", sub)
        depth = -1
        first = self.sub_inl_first[sub]
        for inl in range(first, first + self.sub_inl_count[sub]):
            if self.inl_scope[inl] > depth and self._holds(self.inl_rng_first[inl], self.inl_rng_count[inl], address):
                best, depth = ("inl", inl), self.inl_scope[inl]
        first = self.sub_blk_first[sub]
        for blk in range(first, first + self.sub_blk_count[sub]):
            if self.blk_scope[blk] > depth and self._holds(self.blk_rng_first[blk], self.blk_rng_count[blk], address):
                best, depth = ("blk", blk), self.blk_scope[blk]
        return best

    def _holds(self, first: int, count: int, address: int) -> bool:
        for k in range(first, first + count):
            if self.rng_low[k] <= address < self.rng_high[k]:
                return True
        return False

    def owns(self, row: int) -> bool:
        """True when ``row`` owns bytes: no later row of its sequence starts at its address."""
        nxt = row + 1
        return nxt >= len(self.row_addr) or self.row_addr[nxt] != self.row_addr[row] or bool(
            self.row_flags[row] & FLAG_END)

    def rows_at(self, row: int) -> range:
        """The rows of ``row``'s sequence at its address (its views), in program order."""
        addr = self.row_addr[row]
        lo = row
        while lo > 0 and self.row_addr[lo - 1] == addr and not self.row_flags[lo - 1] & FLAG_END:
            lo -= 1
        hi = row + 1
        n = len(self.row_addr)
        while hi < n and self.row_addr[hi] == addr and not self.row_flags[hi - 1] & FLAG_END \
                and not self.row_flags[hi] & FLAG_END:
            hi += 1
        return range(lo, hi)

    def name_id(self, name: str) -> Optional[int]:
        if self._by_name is None:
            self._by_name = {n: i for i, n in enumerate(self.names)}
        return self._by_name.get(name)

    def inlines_named(self, name: str) -> List[int]:
        nid = self.name_id(name)
        return [] if nid is None else [i for i, n in enumerate(self.inl_name) if n == nid]

    def subs_named(self, name: str) -> List[int]:
        nid = self.name_id(name)
        return [] if nid is None else [i for i, n in enumerate(self.sub_name) if n == nid]

    def file_name(self, file: int) -> Optional[str]:
        return None if file == NO_FILE or file >= len(self.files) else self.files[file]

    def counts(self) -> Dict[str, int]:
        """How much the index holds, for reports and the benchmark."""
        return {
            "files": len(self.files),
            "rows": sum(1 for f in self.row_flags if not f & FLAG_END),
            "functions": len(self.sub_name),
            "inlined_copies": len(self.inl_name),
        }
