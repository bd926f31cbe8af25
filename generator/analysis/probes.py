"""Stage 3a: per-function probe analysis.

Joins stage 1 (the image) and stage 2 (the image's ISA) into a
``FunctionReport``: kinst's function verdict (exclusion list, frame-pointer
prologue rule, decode walk) and one ``Probe`` per instruction.  This module is
machine-independent, like kinst's ``kinst.c``: it asks the image for its ISA
and never branches on which one it is.
"""

from __future__ import annotations

import bisect
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from . import records as R
from .code import MAX_INSN, function_code, reloc_target
from .exclusions import excluded, for_image
from ..common.errors import UserError
from ..image.elf import Function, KernelImage, Section
from ..isa.contract import Insn, Isa

__all__ = ["MAX_INSN", "analyse", "code_runs", "find_offset", "function_code", "function_reason", "refused_regions",
           "reloc_target"]


def code_runs(img: KernelImage, funcs: Sequence[Function]) -> Iterator[Tuple[List[int], bytes, int]]:
    """(indexes, bytes, address of the first) of each run of consecutive functions that lie in one section,
    for whole-image work: one slice of the file per run, not one per function.

    The bytes go from the run's first function to ``MAX_INSN`` past the end
    of its last (or the section's end): each function's bytes as
    ``function_code`` reads them, with no copy per function.  A function
    that does not fit its section (or is in none), or that holds bytes a
    ``$d`` mapping symbol marks as data (``refused_regions``), is in no run:
    the caller analyses it with ``analyse``.
    """
    sec: Optional[Section] = None
    lo = hi = 0
    run: List[int] = []
    data = img.data_in_code() if img.isa.mapping_symbols else []
    for k, f in enumerate(funcs):
        a = f.address
        if data and _holds_data(data, a, a + f.size):
            continue
        if not lo <= a < hi:
            if run:
                yield _run_code(img, funcs, run, sec, hi)
                run = []
            sec = img.section_at(a)
            lo, hi = (sec.addr, sec.addr + sec.size) if sec is not None and not sec.nobits else (0, 0)
        if lo <= a and a + f.size <= hi:
            run.append(k)
    if run:
        yield _run_code(img, funcs, run, sec, hi)


def _holds_data(data: Sequence[Tuple[int, int]], lo: int, hi: int) -> bool:
    """Does ``[lo, hi)`` overlap one of the sorted, disjoint ranges ``data``?"""
    i = bisect.bisect_right(data, (lo, 0)) - 1  # the last range starting at or before lo, then the next
    return any(0 <= j < len(data) and data[j][0] < hi and data[j][1] > lo for j in (i, i + 1))


def _run_code(img: KernelImage, funcs: Sequence[Function], run: List[int], sec: Section,
              hi: int) -> Tuple[List[int], bytes, int]:
    first = funcs[run[0]].address
    end = min(max(funcs[k].address + funcs[k].size for k in run) + MAX_INSN, hi)
    return run, img.read_in(sec, first, end - first), first


def function_reason(img: KernelImage, func: Function, isa: Isa, insns: List[Insn], code: bytes, rule: str) -> str:
    """Why kinst refuses the whole function: exclusion list first, then the prologue rule; "" if neither."""
    return excluded(func.name, isa.name, for_image(img)) or isa.frame_verdict(insns, code, rule)


def refused_regions(img: KernelImage, isa: Isa, func: Function, insns: List[Insn], code: bytes) -> Dict[int, str]:
    """Offsets refused for where they are rather than what they are: the ISA's context refusals (an LDX/STX
    block, a %gs region) and, where the ISA has mapping symbols, data inside the function."""
    regions = isa.context_refusals(insns, code)
    if isa.mapping_symbols:
        data = img.data_in_code()
        if data:
            regions = {**regions, **_data_offsets(data, func, insns)}
    return regions


def _data_offsets(data: Sequence[Tuple[int, int]], func: Function, insns: List[Insn]) -> Dict[int, str]:
    """The instructions of ``func`` that overlap a ``$d`` range: bytes the compiler or the assembler put
    there as data (a literal pool, a jump table), which a breakpoint would corrupt for every reader."""
    out: Dict[int, str] = {}
    i = bisect.bisect_right(data, (func.address + func.size, 0))
    first = bisect.bisect_right(data, (func.address, 0)) - 1
    ranges = [r for r in data[max(first, 0):i] if r[0] < func.address + func.size and r[1] > func.address]
    if not ranges:
        return out
    astray = 0  # where the walk crossed out of a data range mid-instruction: no boundary after it is trusted
    for off, length, _mnem, _ops in insns:
        a = func.address + off
        if astray:
            out[off] = f"after data the decode walk crossed at {astray:#x}: instruction boundaries not trusted"
            continue
        for lo, hi in ranges:
            if a < hi and a + length > lo:
                out[off] = f"data inside the function (a $d mapping symbol marks {lo:#x}-{hi:#x}), not an instruction"
                if a + length > hi:
                    astray = hi
                break
    return out


def analyse(img: KernelImage, func: Function, rule: str = "any", isa: Optional[Isa] = None) -> R.FunctionReport:
    """Decode and classify every instruction of ``func``; give kinst's verdict."""
    isa = isa or img.isa
    code = function_code(img, func)
    insns, walk_error = isa.decode(code, func.address, func.size)
    reason = function_reason(img, func, isa, insns, code, rule)
    regions = refused_regions(img, isa, func, insns, code) if not reason else {}
    probes = [_probe(img, isa, func, code, insn, reason, regions) for insn in insns]
    return R.FunctionReport(
        name=func.name,
        qualified=func.qualified,
        address=func.address,
        size=func.size,
        eligible=not reason,
        reason=reason,
        probes=tuple(probes),
        walk_error=walk_error,
    )


def _probe(img: KernelImage, isa: Isa, func: Function, code: bytes, insn: Insn, func_reason: str, regions) -> R.Probe:
    off, length, mnem, ops = insn
    raw = code[off : off + length]
    addr = func.address + off
    v = isa.classify(raw, addr, mnem, ops)
    status, reason, kind, target, target_symbol = v.status, v.reason, v.kind, v.target, None
    if target is not None and img.e_type == "ET_REL":
        target, target_symbol = reloc_target(img, addr, length, target)
    # The function's verdict comes first (kinst never looks at the instructions
    # of a refused function), then the walk, then regions, then the instruction.
    if func_reason:
        status, reason, kind = R.STATUS_SKIP, f"function refused: {func_reason}", R.KIND_SKIP
    elif off + length > func.size:
        status, reason, kind = R.STATUS_SKIP, "extends past the symbol's end", R.KIND_SKIP
    elif off in regions and status == R.STATUS_OK:
        status, reason, kind = R.STATUS_SKIP, regions[off], R.KIND_SKIP
    return R.Probe(off, addr, length, raw, mnem, ops, status, reason, kind, v.md, target, target_symbol)


def find_offset(report: R.FunctionReport, offset: int) -> R.Probe:
    """The probe at ``offset``, or a UserError naming the nearest boundaries."""
    offsets = [p.offset for p in report.probes]
    for p in report.probes:
        if p.offset == offset:
            return p
    if offset < 0 or offset >= report.size:
        raise UserError(f"offset {offset} is outside {report.qualified} (size {report.size})")
    before = max((o for o in offsets if o < offset), default=None)
    after = min((o for o in offsets if o > offset), default=None)
    near = " and ".join(str(o) for o in (before, after) if o is not None)
    raise UserError(f"offset {offset} is not on an instruction boundary of {report.qualified}; nearest: {near}")
