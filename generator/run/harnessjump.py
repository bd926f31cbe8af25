"""``harness --jump``: which probes the harness places as jumps, and the header that tells its jump part.

The proof (``analysis/jumpsafe.py``, over the table's image) says per probe
whether a jump may replace its breakpoint.  Under ``--all`` the windows of
neighbouring proven sites overlap, and two jumps cannot share bytes, so the
heads are chosen first come, first served in address order: a proven site
whose window starts after the previous head's window ends becomes a head,
and its detour fires the probe of every instruction it displaces, in order
(the proof guarantees nothing enters them but through the head).  A
displaced probe is not a head of its own; its hits are counted by the
detour.  Every other probe keeps its breakpoint.

The detour (``harness_c/jump/kh_jump_amd64.c``) relocates the displaced
instructions with the core's trampoline rule and emulates a last displaced
call with the core's call rule when the call's target is fixed
(the ISA's ``JumpFacts.detour_calls``); a window that ends in any other call keeps its
breakpoint, with a reason.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, NamedTuple, Sequence, Tuple

from ..analysis import jumpreport
from ..analysis.plan import ProbePlan, TableProbe
from ..common.cstring import c_blob
from ..common.errors import UserError
from ..image.elf import KernelImage

GLUE = "jump"  # the optional folder of harness_c/ compiled in
HEADER = "kinst_harness_jump.h"
TEMPLATE = "harness_jump/kinst_harness_jump.h.j2"


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


def render(choice: JumpChoice, command: str, inputs) -> Tuple[str, str]:
    """(file name, text) of the generated header, for ``harness.build(generated=...)``."""
    from ..render import c_header, environment

    if max(choice.fires, default=0) > 255:
        raise UserError("--jump: a window of more than 255 probes")  # cannot happen: 5 bytes
    text = environment().get_template(TEMPLATE).render(
        header=c_header(TEMPLATE, inputs, command), probes=len(choice.fires), heads=choice.heads,
        jumped=choice.jumped, blob=c_blob(bytes(choice.fires)))
    return HEADER, text
