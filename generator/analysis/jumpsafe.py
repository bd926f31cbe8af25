"""The jump probe's safety proof, per site, ahead of time (docs/jump-probes.md).

A jump probe replaces the breakpoint with a jump (amd64: ``jmp rel32``, 5
bytes) to a detour that runs the probe and the displaced instructions.  It
is proven safe at a site when:

- the jump's bytes lie inside the function, and every instruction it
  displaces (the probed one and those after it, up to the jump's size) is a
  probe the trampoline rules relocate;
- no displaced call but the last pushes a return address inside the jump;
- nothing enters the jump's bytes other than at its first: no direct branch
  of the function, no jump-table entry, no code address the image names
  (``analysis/jumprefs.py``); a function with more indirect jumps through
  a register than relative jump tables found is refused whole;
- the displaced bytes hold no site a kernel finds or rewrites by address
  (Linux ``__ex_table``, ``__jump_table``) and no data.

Every refusal's text comes from ``REASONS``, keyed by a short code that the
summaries count.  The proof reads one typed record per function
(``FuncCode``: its instructions as arrays), which ``from_report`` and
``from_rows`` make from the two walks of the analysis; it decides every
site of a function at once with numpy (a whole kernel has millions) and
words only the refusals.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .jumprefs import CodeRefs, for_image
from .records import STATUS_OK, FunctionReport
from ..image.elf import Function, KernelImage
from ..isa.contract import Isa, JumpFacts
from ..isa.hostcore import ROW_TARGET as _ROW_TARGET, Rows

# Why a probe falls back to the breakpoint: code -> text, formatted with the refusal's details.
REASONS: Dict[str, str] = {
    "past-end": "the {size}-byte jump would run past the function's end (+{end})",
    "displaced-refused": "the jump would displace +{off}, which is not a probe: {why}",
    "call-inside": "the jump would displace the call at +{off}, whose return address +{ret} lies inside the jump",
    "branch-into": "+{tgt} lies inside the jump's bytes and is entered from elsewhere: {src}",
    "indirect-jump": "the function has an indirect jump at +{off} whose targets cannot be bounded "
                     "({jumps} indirect jumps through a register, {tables} jump tables found)",
    "held": "the jump would displace {why}",  # a Held's why: what the bytes are
    "unread-table": "the image has {names}, naming code the proof does not read",
}

_TABLE_MAX = 1 << 16  # entries read from one relative jump table at most
_MASK64 = (1 << 64) - 1
_TABLE_STEP = 64  # entries read at a time: a table ends at its first entry outside code


class FuncCode(NamedTuple):
    """One function's instructions, as the proof needs them."""

    offsets: np.ndarray  # int64: each instruction's offset from the function's start, ascending
    lengths: np.ndarray  # int64: its bytes
    probe: np.ndarray  # bool: it is a probe (kinst's rule gives it a table kind)
    call: np.ndarray  # bool: a probe whose kind pushes a return address (JumpFacts.call_kinds)
    refused: Dict[int, str]  # instruction index -> why it is not a probe
    branches: Dict[int, int]  # a direct branch's or call's target address -> the offset of one that names it
    refs: Tuple[int, ...]  # the addresses its %rip-relative operands name (where a jump table may be)
    indirect_reg: int  # offset of its first indirect jump through a register; -1: none
    indirect_regs: int  # how many indirect jumps through a register it has


class JumpVerdict(NamedTuple):
    """Whether one probe may be a jump, and if not, why."""

    offset: int  # the probe's offset
    code: str  # "" when proven; else a key of REASONS
    reason: str  # REASONS[code], filled in


def _refuse(offset: int, code: str, **kw: object) -> JumpVerdict:
    return JumpVerdict(offset, code, REASONS[code].format(**kw))


def _func_code(offsets: List[int], lengths: List[int], kinds: List[Optional[str]], refused: Dict[int, str],
               targets: List[Optional[int]], disps: List[int], raws: List[bytes], address: int,
               facts: JumpFacts) -> FuncCode:
    branches: Dict[int, int] = {}
    refs, regs = [], []
    for off, ln, kind, target, disp, raw in zip(offsets, lengths, kinds, targets, disps, raws):
        if target is not None:
            branches.setdefault(target, off)
        if kind in facts.riprel_kinds:
            refs.append(address + off + ln + disp)
        if 0xFF in raw and facts.indirect_jump(raw) == "reg":
            regs.append(off)
    return FuncCode(np.array(offsets, dtype=np.int64), np.array(lengths, dtype=np.int64),
                    np.array([k is not None for k in kinds], dtype=bool),
                    np.array([k in facts.call_kinds for k in kinds], dtype=bool), refused, branches, tuple(refs),
                    regs[0] if regs else -1, len(regs))


def from_report(rep: FunctionReport, code: bytes, facts: JumpFacts) -> FuncCode:
    """The proof's record from ``analysis.probes.analyse``'s report."""
    ps = rep.probes
    kinds = [p.kind if p.status == STATUS_OK else None for p in ps]
    return _func_code([p.offset for p in ps], [p.length for p in ps], kinds,
                      {i: p.reason for i, p in enumerate(ps) if p.status != STATUS_OK}, [p.target for p in ps],
                      [getattr(p.md, "disp", 0) for p in ps], [code[p.offset : p.offset + p.length] for p in ps],
                      rep.address, facts)


def from_rows(rows: Rows, code: bytes, address: int, isa: Isa) -> FuncCode:
    """The proof's record from the host library's rows of one function (``isa/hostcore.py``)."""
    f = rows.host.fields
    names = ("kr_off", "kr_len", "kr_reason", "kr_flags", "kr_target", "km_kind", "km_disp")
    dt = np.dtype({"names": list(names),
                   "formats": [f"<{'i' if f[n].signed else 'u'}{f[n].size}" for n in names],
                   "offsets": [f[n].offset for n in names], "itemsize": rows.host.rowsize})
    r = np.frombuffer(rows.data, dtype=dt, count=rows.n)
    table = [k.kind for k in isa.table_kinds]
    off, ln, why, flags, target = (r[n].tolist() for n in names[:5])
    kinds = [table[k] if not w else None for k, w in zip(r["km_kind"].tolist(), why)]
    targets = [t if fl & _ROW_TARGET else None for t, fl in zip(target, flags)]
    raws = [code[o : o + n] for o, n in zip(off, ln)]
    return _func_code(off, ln, kinds, dict(rows.reasons), targets, r["km_disp"].tolist(), raws, address, isa.jump)


def _relative_table(img: KernelImage, base: int, func: Function) -> List[int]:
    """The entries of a relative jump table at ``base`` that land in ``func``: signed 32-bit offsets from
    the table, read until one lands outside every executable section (a table may also name a ``.cold``
    part, so one outside the function does not end it)."""
    sec = img.section_at(base)
    if sec is None or sec.executable or sec.nobits:
        return []
    out: List[int] = []
    end = min(sec.addr + sec.size, base + 4 * _TABLE_MAX)
    at = base
    while at + 4 <= end:
        n = min(_TABLE_STEP, (end - at) // 4)
        entries = np.frombuffer(img.read_in(sec, at, n * 4), dtype="<i4").astype(np.int64).tolist()
        for t in ((base + e) & _MASK64 for e in entries):
            s = img.section_at(t)
            if s is None or not s.executable:
                return out
            if func.address <= t < func.address + func.size:
                out.append(t)
        at += n * 4
    return out


def _entered(img: KernelImage, func: Function, fc: FuncCode,
             refs: CodeRefs) -> Tuple[np.ndarray, Dict[int, str], int]:
    """Every offset of ``func`` entered other than by falling through (sorted), where a jump table names
    one, and how many jump tables name some; the function's direct branches say where they come from in
    ``fc.branches``."""
    lo, hi = func.address, func.address + func.size
    a = refs.targets
    # Offsets from the function, subtracted as unsigned: a kernel's addresses are above 2**63.
    found = [(a[np.searchsorted(a, np.uint64(lo)) : np.searchsorted(a, np.uint64(hi))] - np.uint64(lo))
             .astype(np.int64)]
    found.append(np.array([t - lo for t in fc.branches if lo <= t < hi], dtype=np.int64))
    tables: Dict[int, str] = {}
    ntables = 0
    if fc.indirect_reg >= 0:
        for base in fc.refs:
            entries = _relative_table(img, base, func)
            ntables += bool(entries)
            for t in entries:
                tables.setdefault(t - lo, f"the jump table at {base:#x} names it")
        found.append(np.array(sorted(tables), dtype=np.int64))
    return np.unique(np.concatenate(found)), tables, ntables


def prove(img: KernelImage, func: Function, fc: FuncCode, refs: Optional[CodeRefs] = None,
          facts: Optional[JumpFacts] = None) -> List[JumpVerdict]:
    """One verdict per probe of ``func``, in offset order."""
    facts = facts or img.isa.jump
    refs = refs if refs is not None else for_image(img)
    pk = np.nonzero(fc.probe)[0]
    starts = fc.offsets[pk].tolist()
    if refs.unread:
        return [_refuse(o, "unread-table", names=", ".join(refs.unread)) for o in starts]
    entered, tables, ntables = _entered(img, func, fc, refs)
    if ntables < fc.indirect_regs:  # a jump through a register for which no table was found
        return [_refuse(o, "indirect-jump", off=fc.indirect_reg, jumps=fc.indirect_regs, tables=ntables)
                for o in starts]
    codes = _codes(func, fc, pk, entered, refs, facts.size)
    if not any(codes):
        return [JumpVerdict(o, "", "") for o in starts]
    sized = (fc.offsets.tolist(), fc.lengths.tolist(), facts.size)
    return [JumpVerdict(o, "", "") if not c else _why(func, fc, sized, k, c, entered, tables, refs)
            for o, k, c in zip(starts, pk.tolist(), codes)]


def _codes(func: Function, fc: FuncCode, pk: np.ndarray, entered: np.ndarray, refs: CodeRefs,
           size: int) -> List[str]:
    """Each probe's refusal code ("" when proven), the conditions in the order ``REASONS`` gives them."""
    n = len(fc.offsets)
    ends = fc.offsets + fc.lengths
    start = fc.offsets[pk]
    jend = start + size
    m = np.searchsorted(ends, jend, side="left")  # the last displaced instruction
    past = (jend > func.size) | (m >= n)
    mm = np.minimum(m, n - 1)
    notprobe = np.concatenate(([0], np.cumsum(~fc.probe)))
    calls = np.concatenate(([0], np.cumsum(fc.call)))
    displaced_refused = notprobe[mm + 1] - notprobe[pk] > 0
    call_inside = calls[mm] - calls[pk] > 0  # a call before the last displaced one returns inside the jump
    held = np.zeros(len(pk), dtype=bool)
    if refs.held and refs.overlapping(func.address, func.address + func.size + size):
        a = func.address  # a Python int: a kernel's addresses overflow int64
        held = np.array([bool(refs.overlapping(a + s, a + e)) for s, e in zip(start.tolist(), ends[mm].tolist())],
                        dtype=bool)
    i = np.searchsorted(entered, start, side="right")
    into = (i < len(entered)) & (entered[np.minimum(i, max(len(entered) - 1, 0))] < jend) if len(entered) \
        else np.zeros(len(pk), dtype=bool)
    out = np.full(len(pk), "", dtype=object)
    for code, hit in reversed((("past-end", past), ("displaced-refused", displaced_refused & ~past),
                               ("call-inside", call_inside & ~past), ("held", held & ~past),
                               ("branch-into", into))):
        out[hit] = code
    return out.tolist()


def _why(func: Function, fc: FuncCode, sized: Tuple[List[int], List[int], int], k: int, code: str,
         entered: np.ndarray, tables: Dict[int, str], refs: CodeRefs) -> JumpVerdict:
    """The refusal of probe ``k`` (an instruction index), worded with where it comes from; ``sized``: the
    instructions' offsets and lengths as lists, and the jump's size."""
    offs, lens, size = sized
    start, jend = offs[k], offs[k] + size
    m = k
    while m + 1 < len(offs) and offs[m] + lens[m] < jend:
        m += 1
    if code == "past-end":
        return _refuse(start, code, size=size, end=min(func.size, offs[-1] + lens[-1]))
    if code == "displaced-refused":
        x = next(x for x in range(k, m + 1) if not fc.probe[x])
        return _refuse(start, code, off=offs[x], why=fc.refused.get(x, ""))
    if code == "call-inside":
        x = next(x for x in range(k, m) if fc.call[x])
        return _refuse(start, code, off=offs[x], ret=offs[x] + lens[x])
    if code == "held":
        wlo = func.address + start
        return _refuse(start, code, why=min(refs.overlapping(wlo, func.address + offs[m] + lens[m])).why)
    tgt = int(entered[np.searchsorted(entered, start, side="right")])
    src = fc.branches.get(func.address + tgt)
    where = (f"the branch at +{src} targets it" if src is not None else tables.get(tgt)
             or refs.named.get(func.address + tgt)
             or "a branch, pointer or %rip-relative reference in the image names it")
    return _refuse(start, code, tgt=tgt, src=where)


def counts(verdicts: Iterable[JumpVerdict]) -> Tuple[int, Dict[str, int]]:
    """(proven jump probes, refusals by code)."""
    n = 0
    why: Dict[str, int] = {}
    for v in verdicts:
        if v.code:
            why[v.code] = why.get(v.code, 0) + 1
        else:
            n += 1
    return n, why
