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
  (``analysis/jumprefs.py``); a function with an indirect jump through a
  register whose table cannot be found is refused whole;
- the displaced bytes hold no site a kernel finds or rewrites by address
  (Linux ``__ex_table``, ``__jump_table``) and no data.

Every refusal's text comes from ``REASONS``, keyed by a short code that the
summaries count.  The proof reads only typed records (``JumpInsn``), which
``from_report`` and ``from_rows`` make from the two walks of the analysis.
"""

from __future__ import annotations

import bisect
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .jumprefs import CodeRefs, for_image
from .records import STATUS_OK, FunctionReport
from ..image.elf import Function, KernelImage
from ..isa.contract import Isa, JumpFacts
from ..isa.hostcore import ROW_TARGET as _ROW_TARGET, Rows

JUMP = "jump"  # what ``probes --jump`` shows for a proven site

# Why a probe falls back to the breakpoint: code -> text, formatted with the refusal's details.
REASONS: Dict[str, str] = {
    "past-end": "the {size}-byte jump would run past the function's end (+{end})",
    "displaced-refused": "the jump would displace +{off}, which is not a probe: {why}",
    "call-inside": "the jump would displace the call at +{off}, whose return address +{ret} lies inside the jump",
    "branch-into": "+{tgt} lies inside the jump's bytes and is entered from elsewhere: {src}",
    "indirect-jump": "the function has an indirect jump at +{off} whose targets cannot be bounded "
                     "(no jump table found for it)",
    "held": "the jump would displace {why}",
    "unread-table": "the image has {names}, naming code the proof does not read",
}

_TABLE_MAX = 1 << 16  # entries read from one relative jump table at most


class JumpInsn(NamedTuple):
    """One instruction of a function, as the proof needs it."""

    offset: int  # from the function's start
    length: int  # bytes
    kind: Optional[str]  # its table kind (how a breakpoint hit resumes); None: not a probe
    refused: str  # why it is not a probe ("" when it is)
    target: Optional[int]  # a direct branch's or call's target address
    ref: Optional[int]  # the address a %rip-relative operand names
    indirect: str  # "reg" / "mem" for an indirect jump (JumpFacts.indirect_jump), else ""


class JumpVerdict(NamedTuple):
    """Whether one probe may be a jump, and if not, why."""

    offset: int  # the probe's offset
    code: str  # "" when proven; else a key of REASONS
    reason: str  # REASONS[code], filled in


def _refuse(offset: int, code: str, **kw: object) -> JumpVerdict:
    return JumpVerdict(offset, code, REASONS[code].format(**kw))


def from_report(rep: FunctionReport, code: bytes, facts: JumpFacts) -> List[JumpInsn]:
    """The proof's records from ``analysis.probes.analyse``'s report."""
    out = []
    for p in rep.probes:
        ok = p.status == STATUS_OK
        disp = getattr(p.md, "disp", 0)
        ref = p.address + p.length + disp if ok and p.kind in _RIPREL_KINDS else None
        raw = code[p.offset : p.offset + p.length]
        out.append(JumpInsn(p.offset, p.length, p.kind if ok else None, "" if ok else p.reason, p.target, ref,
                            facts.indirect_jump(raw) if 0xFF in raw else ""))
    return out


_RIPREL_KINDS = frozenset(("riprel", "call-riprel"))


def _relative_table(img: KernelImage, base: int, func: Function) -> List[int]:
    """The entries of a relative jump table at ``base`` that land in ``func``: signed 32-bit offsets from
    the table, read until one lands outside every executable section (a table may also name a ``.cold``
    part, so one outside the function does not end it)."""
    sec = img.section_at(base)
    if sec is None or sec.executable or sec.nobits:
        return []
    n = min(_TABLE_MAX, (sec.addr + sec.size - base) // 4)
    vals = np.frombuffer(img.read_in(sec, base, n * 4), dtype="<i4").astype(np.int64) + base
    out = []
    for t in vals.tolist():
        s = img.section_at(t)
        if s is None or not s.executable:
            break
        if func.address <= t < func.address + func.size:
            out.append(t)
    return out


def _entries(img: KernelImage, func: Function, insns: Sequence[JumpInsn], refs: CodeRefs
             ) -> Tuple[Dict[int, str], Optional[JumpVerdict]]:
    """Every offset of ``func`` entered other than by falling through, with where from; and the function's
    refusal when an indirect jump's targets cannot be bounded."""
    lo, hi = func.address, func.address + func.size
    entered: Dict[int, str] = {}
    a = refs.targets
    i, j = np.searchsorted(a, np.uint64(lo)), np.searchsorted(a, np.uint64(hi))
    for t in a[i:j].tolist():
        entered[t - lo] = "a branch, pointer or %rip-relative reference in the image names it"
    for x in insns:
        if x.target is not None and lo <= x.target < hi:
            entered[x.target - lo] = f"the branch at +{x.offset} targets it"
    tables = [t for x in insns if x.ref is not None for t in _relative_table(img, x.ref, func)]
    for t in tables:
        entered.setdefault(t - lo, "a jump table entry names it")
    reg = next((x for x in insns if x.indirect == "reg"), None)
    if reg is not None and not tables:
        return entered, _refuse(-1, "indirect-jump", off=reg.offset)
    return entered, None


def prove(img: KernelImage, func: Function, insns: Sequence[JumpInsn], refs: Optional[CodeRefs] = None,
          facts: Optional[JumpFacts] = None) -> List[JumpVerdict]:
    """One verdict per probe of ``func`` (its instructions ``insns``, in order)."""
    facts = facts or img.isa.jump
    refs = refs if refs is not None else for_image(img)
    probes = [k for k, x in enumerate(insns) if x.kind is not None]
    if refs.unread:
        return [_refuse(insns[k].offset, "unread-table", names=", ".join(refs.unread)) for k in probes]
    entered, whole = _entries(img, func, insns, refs)
    if whole is not None:
        return [whole._replace(offset=insns[k].offset) for k in probes]
    inside = sorted(entered)
    return [_site(func, insns, k, facts, entered, inside, refs) for k in probes]


def _site(func: Function, insns: Sequence[JumpInsn], k: int, facts: JumpFacts, entered: Dict[int, str],
          inside: List[int], refs: CodeRefs) -> JumpVerdict:
    start = insns[k].offset
    jend = start + facts.size  # one past the jump's last byte
    if jend > func.size:
        return _refuse(start, "past-end", size=facts.size, end=func.size)
    m = k
    while insns[m].offset + insns[m].length < jend:
        if m + 1 == len(insns):
            return _refuse(start, "past-end", size=facts.size, end=insns[m].offset + insns[m].length)
        m += 1
    for x in insns[k : m + 1]:
        if x.kind is None:
            return _refuse(start, "displaced-refused", off=x.offset, why=x.refused)
        ret = x.offset + x.length
        if x.kind in facts.call_kinds and ret < jend:
            return _refuse(start, "call-inside", off=x.offset, ret=ret)
    wlo, whi = func.address + start, func.address + insns[m].offset + insns[m].length
    for held in refs.overlapping(wlo, whi):
        return _refuse(start, "held", why=held.why)
    i = bisect.bisect_right(inside, start)
    if i < len(inside) and inside[i] < jend:
        return _refuse(start, "branch-into", tgt=inside[i], src=entered[inside[i]])
    return JumpVerdict(start, "", "")


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


def from_rows(rows: Rows, code: bytes, address: int, isa: Isa) -> List[JumpInsn]:
    """The proof's records from the host library's rows of one function (``isa/hostcore.py``)."""
    f = rows.host.fields
    names = ("kr_off", "kr_len", "kr_reason", "kr_flags", "kr_target", "km_kind", "km_disp")
    dt = np.dtype({"names": list(names),
                   "formats": [f"<{'i' if f[n].signed else 'u'}{f[n].size}" for n in names],
                   "offsets": [f[n].offset for n in names], "itemsize": rows.host.rowsize})
    r = np.frombuffer(rows.data, dtype=dt, count=rows.n)
    kinds = [k.kind for k in isa.table_kinds]
    facts = isa.jump
    out = []
    for i, (off, ln, why, flags, target, kind, disp) in enumerate(zip(*(r[n].tolist() for n in names))):
        k = kinds[kind] if not why else None
        raw = code[off : off + ln]
        out.append(JumpInsn(off, ln, k, rows.reasons.get(i, "") if why else "",
                            target if flags & _ROW_TARGET else None,
                            address + off + ln + disp if k in _RIPREL_KINDS else None,
                            facts.indirect_jump(raw) if 0xFF in raw else ""))
    return out
