"""Stage 3a: per-function probe analysis.

Joins stage 1 (the image) and stage 2 (the ISA decoder/classifier) into a
``FunctionReport``: kinst's function verdict (exclusion list, frame-pointer
prologue rule, decode walk) and one ``Probe`` per instruction.  This module is
machine-independent, like kinst's ``kinst.c``: the ISA module is looked up from
the image and never branched on.
"""

from __future__ import annotations

from types import ModuleType
from typing import List, Optional, Tuple

from . import records as R
from .errors import UserError
from .image import Function, KernelImage
from .isa import isa_for

# kinst_excluded(): names probe context may call, or that would make a broken
# kinst impossible to debug.  Prefixes and exact names, with their exceptions.
# NOTE: kinst itself excludes exactly owner_mtx/owner_rm/owner_rw/owner_sx; we
# refuse every owner_* (a superset), as the project's issue asks.
EXCLUDED_PREFIXES: Tuple[Tuple[str, str], ...] = (
    ("dtrace_", "may be called from probe context"),
    ("kinst_", "part of kinst itself"),
    ("db_", "DDB: tracing it makes a broken kinst impossible to debug"),
    ("kdb_", "KDB: tracing it makes a broken kinst impossible to debug"),
    ("owner_", "lock owner method, may be called from probe context"),
)
EXCLUDED_EXCEPTIONS: Tuple[str, ...] = ("dtrace_safe_",)
EXCLUDED_NAMES = {
    "cpu_switch": "changes curthread; a probe here crashes in probe context",
    "trap_check": "part of the trap path kinst itself runs on",
}

# Bytes read past a symbol's end so an instruction straddling it decodes whole.
_MAX_INSN = 15


def excluded(name: str, isa: ModuleType) -> str:
    """kinst's name-based verdict: the reason, or "" when the name is allowed."""
    md = isa.MD_EXCLUDED
    if name in md:
        why = md[name] if isinstance(md, dict) else "listed by the ISA"
        return f"excluded by name ({isa.ARCH}): {why}"
    if name in EXCLUDED_NAMES:
        return f"excluded by name: {EXCLUDED_NAMES[name]}"
    if name.startswith(EXCLUDED_EXCEPTIONS):
        return ""
    for prefix, why in EXCLUDED_PREFIXES:
        if name.startswith(prefix):
            return f"excluded by name ({prefix}*): {why}"
    return ""


def analyse(img: KernelImage, func: Function, rule: str = "any", isa: Optional[ModuleType] = None) -> R.FunctionReport:
    """Decode and classify every instruction of ``func``; give kinst's verdict."""
    isa = isa or isa_for(img.arch)
    sec = img.section_at(func.address)
    avail = func.size
    if sec is not None:
        avail = min(func.size + _MAX_INSN, sec.addr + sec.size - func.address)
    if sec is None or avail < func.size:
        raise UserError(f"{img.path}: function {func.qualified} lies outside its section; the symbol table is corrupt")
    code = img.read(func.address, avail)
    insns, walk_error = isa.decode(code, func.address, func.size)

    reason = excluded(func.name, isa)
    if not reason:
        reason = isa.frame_verdict(insns, code, rule)
    context = getattr(isa, "context_refusals", None)
    regions = context(insns) if context is not None and not reason else {}
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


def _probe(img: KernelImage, isa: ModuleType, func: Function, code: bytes, insn, func_reason: str, regions) -> R.Probe:
    off, length, mnem, ops = insn
    raw = code[off : off + length]
    addr = func.address + off
    fields = isa.classify(raw, addr, mnem, ops)
    status, reason, kind = fields[0], fields[1], fields[2]
    target, target_symbol = fields[12], None
    if target is not None and length >= 5 and img.e_type == "ET_REL":
        target, target_symbol = _reloc_target(img, addr, length, target)
    # The function's verdict comes first (kinst never looks at the instructions
    # of a refused function), then the walk, then regions, then the instruction.
    if func_reason:
        status, reason, kind = R.STATUS_SKIP, f"function refused: {func_reason}", R.KIND_SKIP
    elif off + length > func.size:
        status, reason, kind = R.STATUS_SKIP, "extends past the symbol's end", R.KIND_SKIP
    elif off in regions and status == R.STATUS_OK:
        status, reason, kind = R.STATUS_SKIP, regions[off], R.KIND_SKIP
    return R.Probe(off, addr, length, raw, mnem, ops, status, reason, kind, *fields[3:12], target, target_symbol)


def _reloc_target(img: KernelImage, addr: int, length: int, target: int) -> Tuple[Optional[int], Optional[str]]:
    """For ET_REL, name a rel32 target that only a relocation knows."""
    field = addr + length - 4
    for r in img.relocs_in(field, 1):
        if r.resolved:
            return target, None
        off = r.addend + (addr + length - field)
        return None, r.symbol + (f"{off:+#x}" if off else "")
    return target, None


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


def analyse_all(img: KernelImage, funcs: List[Function], rule: str = "any") -> List[R.FunctionReport]:
    isa = isa_for(img.arch)
    return [analyse(img, f, rule, isa) for f in funcs]
