"""Per-function summaries: ``probes --all --summary``.

A summary answers "how much of this image can kinst trace, and how" without
printing every instruction: the function verdict and its probes counted by
emulation kind.  Two paths compute it and must agree:

- ``from_report``: from the full capstone analysis (``probes.analyse``);
- ``fast``: from the ISA's accelerator (``isa/<arch>_fast.py``) when one
  exists, falling back to ``from_report`` for any function it declines.

``tests/test_accelerator.py`` holds the two equal on real images.
"""

from __future__ import annotations

import importlib
from collections import Counter
from types import ModuleType
from typing import Any, Dict, Optional

from .image import Function, KernelImage
from .probes import analyse, excluded
from .records import STATUS_OK, FunctionReport

_MAX_INSN = 15


def from_report(rep: FunctionReport) -> Dict[str, Any]:
    kinds = Counter(p.kind for p in rep.probes if p.status == STATUS_OK)
    return _record(rep.qualified, rep.address, rep.size, rep.reason, rep.walk_error, len(rep.probes), kinds)


def _record(name, address, size, reason, walk_error, n, kinds) -> Dict[str, Any]:
    ok = sum(kinds.values())
    return {
        "function": name,
        "address": address,
        "size": size,
        "eligible": not reason,
        "reason": reason,
        "walk_error": walk_error,
        "instructions": n,
        "probes": ok,
        "skipped": n - ok,
        "kinds": {k: kinds[k] for k in sorted(kinds) if kinds[k]},
    }


def accelerator(isa: ModuleType) -> Optional[ModuleType]:
    """The ISA's accelerator module, or None when it has none."""
    try:
        return importlib.import_module(f"{isa.__name__}_fast")
    except ImportError:
        return None


def fast(img: KernelImage, func: Function, rule: str, isa: ModuleType, accel: Optional[ModuleType]) -> Dict[str, Any]:
    """The summary via the accelerator; the capstone path if it declines."""
    if accel is None:
        return from_report(analyse(img, func, rule, isa))
    sec = img.section_at(func.address)
    if sec is None:
        return from_report(analyse(img, func, rule, isa))
    avail = min(func.size + _MAX_INSN, sec.addr + sec.size - func.address)
    code = img.read(func.address, avail)
    s = accel.summarise(code, func.address, func.size)
    if s is None:
        return from_report(analyse(img, func, rule, isa))
    reason = excluded(func.name, isa)
    if not reason:
        ok = s.frame_ok if rule == "any" else s.first_byte_push
        reason = "" if ok else isa.frame_verdict([], b"", rule)
    kinds = Counter() if reason else Counter(s.kinds)
    return _record(func.qualified, func.address, func.size, reason, s.walk_error, s.instructions, kinds)
