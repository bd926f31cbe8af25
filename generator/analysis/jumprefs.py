"""Who names a code address: the image-wide half of the jump-probe proof (docs/jump-probes.md).

A 5-byte jump may replace an instruction only if nothing enters the bytes
it overwrites other than at its first.  What may enter code, or name a code
address that something may later jump to, is found here for the whole image
at once, over-approximated (a false reference only refuses a jump probe;
a missed one would break the program):

- every rel32 after a direct-branch opcode, in every executable section,
  whatever function (or no function: code without a symbol, a ``.cold``
  part) it lies in;
- every %rip-relative disp32 after a ModR/M byte that could say so, with
  every immediate length that may follow it (an ``lea`` of a label: a
  computed goto, FreeBSD's ``onfault`` handler in position-independent
  code);
- every absolute code address: a sign-extended imm32 in code (the kernel
  code model: ``movq $handler, PCB_ONFAULT(%reg)``) unless the image is
  position-independent, every aligned 8-byte value in data (jump tables,
  function pointers), and every dynamic relocation's value (a shared
  object's pointers are relocations, not bytes);
- the kernel tables the ISA names (``JumpFacts.code_tables``: Linux's
  ``__ex_table``, ``__jump_table``): their sites stay in place, their
  resume points are targets.

Data inside executable sections (``STT_OBJECT`` symbols there, mapping
symbols' ``$d`` ranges) is a region no jump may cover.  Relative jump
tables (entries that are offsets from the table) are the function's own
business: ``analysis/jumpsafe.py`` reads them from the ``lea`` that names
the table.
"""

from __future__ import annotations

import bisect
import itertools
import weakref
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..image.elf import KernelImage, Section
from ..isa.contract import CodeTable, JumpFacts

_STT_OBJECT = 1
_CHUNK = 1 << 23  # bytes of a section scanned at once: bounds the scan's temporary arrays
_ALL_ONES = (1 << 64) - 1
_DYN_RELA = (".rela.dyn", ".rela.plt")  # the loader's relocation sections (ELF64 RELA)


class Held(NamedTuple):
    """Bytes no jump may cover: a site a kernel finds by address or rewrites, or data in code."""

    start: int  # first address
    end: int  # one past the last
    why: str  # what it is, for the refusal


class CodeRefs(NamedTuple):
    """Every code address the image names, and the bytes that must stay in place."""

    targets: np.ndarray  # sorted unique uint64 addresses in executable sections that something may enter
    held: Tuple[Held, ...]  # sorted by start
    unread: Tuple[str, ...]  # sections naming code that the proof does not read: no jump probe in this image
    starts: Tuple[int, ...]  # held[i].start, for bisection
    reach: Tuple[int, ...]  # the largest end among held[:i + 1]
    named: Dict[int, str]  # targets a kernel table names -> what they are (the others come from scans)

    def overlapping(self, lo: int, hi: int) -> List[Held]:
        """The held ranges that overlap ``[lo, hi)``."""
        out = []
        i = bisect.bisect_left(self.starts, hi) - 1
        while i >= 0 and self.reach[i] > lo:
            if self.held[i].end > lo:
                out.append(self.held[i])
            i -= 1
        return out


def _code_sections(img: KernelImage) -> List[Section]:
    return [s for s in img.sections if s.executable and not s.nobits and s.size]


def _in_code(addrs: np.ndarray, code: Sequence[Section]) -> np.ndarray:
    keep = np.zeros(len(addrs), dtype=bool)
    for s in code:
        keep |= (addrs >= np.uint64(s.addr)) & (addrs < np.uint64(s.addr + s.size))
    return addrs[keep]


def _int32_at(b: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The little-endian signed 32-bit values at positions ``p`` of ``b``, as int64."""
    v = (b[p].astype(np.uint32) | b[p + 1].astype(np.uint32) << 8 | b[p + 2].astype(np.uint32) << 16
         | b[p + 3].astype(np.uint32) << 24)
    return v.view(np.int32).astype(np.int64)


def _plus(base: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``base + delta`` modulo 2**64 (kernel addresses are above 2**63)."""
    return base.astype(np.uint64) + delta.astype(np.int64).view(np.uint64)


def _scan_code(img: KernelImage, facts: JumpFacts, s: Section, abs_code: bool,
               code: Sequence[Section]) -> List[np.ndarray]:
    """The code addresses section ``s``'s bytes may name (each scan's candidates kept only where they land in
    ``code``, chunk by chunk, so that a large image's scan stays small)."""
    out: List[np.ndarray] = []
    data = img.read_in(s, s.addr, s.size)
    overlap = 8
    for lo in range(0, s.size, _CHUNK):
        hi = min(s.size, lo + _CHUNK + overlap)
        b = np.frombuffer(bytes(data[lo:hi]), dtype=np.uint8)
        n = len(b)
        if n < 5:
            break
        last = n - 4  # a disp32 at p needs p + 4 <= n
        for op in facts.rel32_opcodes:
            k = len(op)
            m = np.ones(max(0, last - k + 1), dtype=bool)
            for j, byte in enumerate(op):
                m &= b[j : j + len(m)] == byte
            p = np.nonzero(m)[0] + k
            out.append(_in_code(_plus(np.uint64(s.addr + lo) + p.astype(np.uint64) + np.uint64(4), _int32_at(b, p)),
                                code))
        mask, val = facts.riprel_modrm
        p = np.nonzero((b[: last - 1] & mask) == val)[0] + 1
        ends = _plus(np.uint64(s.addr + lo) + p.astype(np.uint64) + np.uint64(4), _int32_at(b, p))
        for imm in range(facts.riprel_imm_max + 1):
            out.append(_in_code(ends + np.uint64(imm), code))
        if abs_code and facts.abs_code_width == 4:
            p = np.arange(0, last, dtype=np.int64)
            out.append(_in_code(_int32_at(b, p).view(np.uint64), code))
    return out


def _scan_data(img: KernelImage, s: Section) -> np.ndarray:
    data = img.read_in(s, s.addr, s.size)
    start = (-s.addr) % 8
    body = bytes(data[start : start + (s.size - start) // 8 * 8])
    return np.frombuffer(body, dtype="<u8").astype(np.uint64)


_RELA = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])  # Elf64_Rela
_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                 ("size", "<u8")])  # Elf64_Sym


def _dynamic(img: KernelImage) -> np.ndarray:
    """The values a loader writes (a shared object's pointers are relocations, not bytes): each dynamic
    relocation's addend plus its symbol's value, read in bulk (a large library has hundreds of thousands)."""
    if img.e_type != "ET_DYN":
        return np.zeros(0, dtype=np.uint64)
    view = img.section_view(".dynsym")
    sym = np.frombuffer(view[0], dtype=_SYM, count=len(view[0]) // _SYM.itemsize) if view else None
    out = []
    for name in _DYN_RELA:
        view = img.section_view(name)
        if view is None:
            continue
        r = np.frombuffer(view[0], dtype=_RELA, count=len(view[0]) // _RELA.itemsize)
        value = r["addend"].view(np.uint64).copy()
        if sym is not None:
            idx = (r["info"] >> np.uint64(32)).astype(np.int64)
            ok = (idx > 0) & (idx < len(sym))
            value[ok] += sym["value"][idx[ok]]
        out.append(value)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint64)


def _addresses(b: np.ndarray, first: np.ndarray, base: np.ndarray, field: int, absolute: bool) -> np.ndarray:
    """The addresses a field of every entry names (entries at ``first`` of ``b``, at ``base`` in memory)."""
    if absolute:
        p = first + field
        lo, hi = (_int32_at(b, q).view(np.uint64) & np.uint64(0xFFFFFFFF) for q in (p, p + 4))
        return lo | hi << np.uint64(32)
    return _plus(base + np.uint64(field), _int32_at(b, first + field))


def _table_span(img: KernelImage, t: CodeTable, bounds: Dict[str, int]) -> Optional[Tuple[Section, int, int]]:
    """(section, address, size) of table ``t``: its own section, or the span between its bounds' symbols."""
    sec = next((s for s in img.sections if s.name == t.section and not s.nobits), None)
    if sec is not None:
        return sec, sec.addr, sec.size
    lo, hi = bounds.get(t.bounds[0]), bounds.get(t.bounds[1])
    sec = img.section_at(lo) if lo is not None and hi is not None and hi > lo else None
    if sec is None or sec.nobits or hi > sec.addr + sec.size:
        return None
    return sec, lo, hi - lo


def _read_table(img: KernelImage, t: CodeTable, code: Sequence[Section], bounds: Dict[str, int]
                ) -> Optional[Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]]:
    """(sites, their lengths, resume points or None) of table ``t`` in ``img``, or None when the image has no
    such table or it does not read as ``t`` (its size is no multiple of an entry, or a site is not code)."""
    span = _table_span(img, t, bounds)
    if span is None or span[2] < t.entry or span[2] % t.entry:
        return None
    sec, addr, size = span
    b = np.frombuffer(img.read_in(sec, addr, size), dtype=np.uint8)
    first = np.arange(0, len(b), t.entry, dtype=np.int64)
    if t.sites >= 0:
        # Padding (a page-aligned table's tail: zeros) and discarded sites (the linker's -1) name no code.
        if t.absolute:
            raw = _addresses(b, first, np.zeros(len(first), np.uint64), t.sites, True)
            first = first[(raw != 0) & (raw != np.uint64(_ALL_ONES))]
        else:
            first = first[_int32_at(b, first + t.sites) != 0]
    base = np.uint64(addr) + first.astype(np.uint64)
    sites = _addresses(b, first, base, t.sites, t.absolute) if t.sites >= 0 else np.zeros(0, np.uint64)
    if len(_in_code(sites, code)) != len(sites):
        return None
    lens = b[first + t.len_field].astype(np.int64) if t.len_field >= 0 else np.full(len(sites), t.site_len)
    resume = _addresses(b, first, base, t.resume, t.absolute) if t.resume >= 0 else None
    return sites, lens, resume


def _tables(img: KernelImage, facts: JumpFacts, code: Sequence[Section],
            named: Dict[int, str]) -> Tuple[List[np.ndarray], List[Held], List[str]]:
    """The kernel tables' resume points (each also into ``named``, with what it is), their sites, and the
    tables the image has that read as none of their layouts."""
    targets: List[np.ndarray] = []
    held: List[Held] = []
    wanted = {n for t in facts.code_tables for n in t.bounds if n}
    bounds = {s.name: s.value for s in img.symbols() if s.name in wanted} if img.e_type != "ET_REL" else {}
    present = {t.section for t in facts.code_tables
               if any(s.name == t.section for s in img.sections) or t.bounds[0] in bounds}
    for t in facts.code_tables:
        if t.section not in present:
            continue
        got = _read_table(img, t, code, bounds)
        if got is None:
            continue
        present.discard(t.section)
        sites, lens, resume = got
        held.extend(Held(a, a + n, f"{a:#x}, {t.site_doc} ({t.section})")
                    for a, n in zip(sites.tolist(), lens.tolist()))
        if resume is not None:
            targets.append(resume)
            named.update((a, f"{t.resume_doc} ({t.section})") for a in resume.tolist())
    return targets, held, sorted(present)


def _data_held(img: KernelImage, code: Sequence[Section]) -> List[Held]:
    out = [Held(lo, hi, f"data at {lo:#x}-{hi:#x} (a $d mapping symbol)") for lo, hi in img.data_in_code()]
    for sym in img.symbols():
        if sym.type != _STT_OBJECT or sym.size <= 0:
            continue
        addr = sym.value if img.e_type != "ET_REL" else None
        if addr is None:
            sec = img.section_by_index(sym.shndx)
            if sec is None:
                continue
            addr = sec.addr + sym.value
        if any(s.addr <= addr < s.addr + s.size for s in code):
            out.append(Held(addr, addr + sym.size, f"data object {sym.name} at {addr:#x}-{addr + sym.size:#x}"))
    return out


def code_refs(img: KernelImage, facts: JumpFacts) -> CodeRefs:
    """Every code address ``img`` names, and the bytes that must stay in place (see the module docstring)."""
    code = _code_sections(img)
    abs_code = img.e_type != "ET_DYN"  # position-independent code holds no absolute addresses
    found: List[np.ndarray] = []
    for s in code:
        found.extend(_scan_code(img, facts, s, abs_code, code))
    for s in img.sections:
        if not s.executable and not s.nobits and s.size >= 8:
            found.append(_in_code(_scan_data(img, s), code))
    found.append(_in_code(_dynamic(img), code))
    named: Dict[int, str] = {}
    table_targets, held, misread = _tables(img, facts, code, named)
    found.extend(_in_code(t, code) for t in table_targets)
    held.extend(_data_held(img, code))
    every = np.unique(np.concatenate([a for a in found if len(a)] or [np.zeros(0, np.uint64)]))
    unread = tuple(sorted({n for n in facts.unread_tables if any(s.name == n for s in img.sections)} | set(misread)))
    held.sort()
    reach = list(itertools.accumulate((h.end for h in held), max))
    return CodeRefs(every, tuple(held), unread, tuple(h.start for h in held), tuple(reach), named)


# Per open image, for as long as someone holds the image (a long process -- the tests, a bench -- keeps none).
_CACHE: "weakref.WeakKeyDictionary[KernelImage, CodeRefs]" = weakref.WeakKeyDictionary()


def for_image(img: KernelImage) -> CodeRefs:
    """``code_refs`` of ``img``, made once per open image (whole-image work makes it before its workers fork)."""
    refs = _CACHE.get(img)
    if refs is None:
        refs = _CACHE[img] = code_refs(img, img.isa.jump)
    return refs
