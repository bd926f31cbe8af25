"""Which probes of a table are jump heads, and how many probes each one's detour fires.

The proof (``analysis/jumpsafe.py``, over the table's image) says per probe
whether a jump may replace its breakpoint.  Under ``--all`` the windows of
neighbouring proven sites overlap, and two jumps cannot share bytes, so the
heads are chosen first come, first served in address order: a proven site
whose window starts after the previous head's window ends becomes a head,
and its detour fires the probe of every instruction it displaces, in order
(the proof guarantees nothing enters them but through the head).  A
displaced probe is not a head of its own; its hits are counted by the
detour.  Every other probe keeps its breakpoint.  A window that ends in a
call the detour cannot emulate ahead (not in the ISA's
``JumpFacts.detour_calls``) keeps its breakpoint, with a reason.

One choice for every consumer, carried in the table as ``kt_jump``
(``providers/kinst/generate.py``): the kinst module's (``generate --jump``),
the harness's (``harness --jump``) and the ring-0 guest's (``run/ring0/jumps.py``).
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, NamedTuple, Sequence, Tuple

from . import jumpreport
from .plan import ProbePlan, TableProbe
from ..common.errors import UserError
from ..image.elf import KernelImage


class JumpChoice(NamedTuple):
    """Which probes are jumps: the harness's placement, from the proof."""

    fires: Tuple[int, ...]  # per table probe: how many probes its detour fires (0: not a head)
    heads: int  # jumps chosen
    jumped: int  # probes their detours fire (heads included)
    traps: Dict[str, int]  # probes left to a breakpoint, by the proof's reason code ("call-kind": its window ends in a call not in JumpFacts.detour_calls)


def _window(probes: Sequence[TableProbe], i: int, size: int) -> int:
    """How many probes from ``probes[i]`` a ``size``-byte jump displaces (0 if they are not contiguous)."""
    end, n = probes[i].offset, 0
    while end < probes[i].offset + size:
        j = i + n
        if j >= len(probes) or probes[j].offset != end:
            return 0
        end += probes[j].length
        n += 1
    return n


def choose(plan: ProbePlan, img: KernelImage, rule: str) -> JumpChoice:
    """The heads and their windows over ``plan`` (made from ``img``), from the proof of every plan function."""
    jumpreport.require(img)
    size = img.isa.jump.size
    by_addr = {(f.name, f.address): f for f in img.functions()}
    probes = list(plan.probes())
    per_func: Dict[int, List[TableProbe]] = {}
    for p in probes:
        per_func.setdefault(p.func, []).append(p)
    fires = [0] * len(probes)
    traps: Counter = Counter()
    for fi, fprobes in per_func.items():
        pf = plan.funcs[fi]
        func = by_addr.get((pf.name, pf.address))
        if func is None:
            raise UserError(f"--jump: {pf.qualified} is not a function of {img.path}; the proof needs the table's image")
        fj = jumpreport.of_function(img, func, rule)
        proven = {v.offset: v.code for v in fj.verdicts}
        unproven = "function" if fj.reason else "unproven"  # the proof refused the function, or has no verdict
        i = 0
        while i < len(fprobes):
            code = proven.get(fprobes[i].offset, unproven)
            n = _window(fprobes, i, size) if code == "" else 0
            last = fprobes[i + n - 1].kind if n else ""
            if n and last in img.isa.jump.call_kinds and last not in img.isa.jump.detour_calls:
                code, n = "call-kind", 0
            if not n:
                traps[code or "unproven"] += 1  # proven, but its window is not contiguous probes
                i += 1
                continue
            fires[fprobes[i].index] = n
            i += n
    heads = sum(1 for n in fires if n)
    return JumpChoice(tuple(fires), heads, sum(fires), dict(sorted(traps.items())))
