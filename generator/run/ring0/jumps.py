"""``vm-test --guest linux --jump``: which probes of the guest's table become jump probes.

The proof is ``analysis/jumpsafe.py``'s and the placement (first come, first
served heads, a window of contiguous probes, a last call only of
``JumpFacts.detour_calls``) is ``analysis/jumpplan.py``'s ``choose()``, as the harness's and the FreeBSD table's:
both are used as they are, never restated here.  What is the guest's own:

- **The proof runs over the vmlinux, the table over the live text.**  The
  live image (``live.py``) holds only ``.text`` and the function symbols:
  none of the data, relocations and kernel tables (``__ex_table``'s fixups,
  ``.altinstructions``, pointers in data) the proof reads to find who enters
  a window.  The vmlinux has them all.  The two differ only where the
  kernel patched itself at boot (alternatives, paravirt calls, retpolines,
  return thunks, ftrace's nops, lock prefixes), every one of which the proof
  *holds* (no window covers it), and a head is kept only when its window's
  live bytes equal the vmlinux's (else it stays a breakpoint: ``live-bytes``).
- **The target module's functions keep their breakpoints** (``target``): the
  proof would need the module's own image-wide scan, and they are there for
  the call forms, not for jumps.
- **Displaced probes are not probed.**  A head's detour counts one hit, the
  head's; the other instructions its jump displaces run in the detour and
  are neither armed nor counted (state ``displaced``), so every hit the
  module reports is an execution of one address that the QEMU plugin counts
  by itself: an int3 or a ``jmp`` executed at the head.  The plugin must
  also see nothing executed at a displaced address while the jump is armed
  (the proof says nothing enters there; a detour that resumed short would).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, NamedTuple, Optional, Tuple

from ...analysis import jumpplan
from ...analysis.jumpplan import JumpChoice
from ...analysis.plan import ProbePlan
from ...image.elf import KernelImage

# Reasons of the guest's own for a proven head that stays a breakpoint (besides the proof's and
# jumpplan's codes).
LIVE_BYTES = "live-bytes"  # the window's live bytes are not the vmlinux's the proof read
TARGET = "target"  # a function of the target module, not of the vmlinux


class GuestJumps(NamedTuple):
    """The jump heads of a guest table (its ``kt_jump``; the glue's ``kinst_linux_jump.h`` sizes the detours)."""

    fires: Tuple[int, ...]  # per table probe: the probes its jump displaces, itself included (0: not a head)
    heads: int  # jump probes
    displaced: int  # probes displaced by a head (not probed)
    traps: Dict[str, int]  # probes that stay breakpoints, by reason code

    @property
    def breakpoints(self) -> int:
        return sum(self.traps.values())

    def as_choice(self) -> Optional[JumpChoice]:
        """What the guest's table carries (``kt_jump``, rendered as ``generate --jump`` renders the proof's
        choice), or None without heads: one record of the heads for the FreeBSD module and this glue."""
        if not self.heads:
            return None
        return JumpChoice(self.fires, self.heads, sum(self.fires), dict(self.traps))


NO_JUMPS = GuestJumps((), 0, 0, {})


def _kernel_part(plan: ProbePlan, tabled: int) -> Tuple[ProbePlan, int]:
    """The kernel's functions of ``plan`` alone (the first ``tabled`` are the target module's), table indices
    from 0; and how many probes the target's part has."""
    n = sum(f.probes for f in plan.funcs[:tabled])
    funcs = tuple(f._replace(first=f.first - n) for f in plan.funcs[tabled:])
    return dataclasses.replace(plan, funcs=funcs), n


def choose(plan: ProbePlan, target_tabled: int, rule: str, vmlinux: KernelImage, live: KernelImage) -> GuestJumps:
    """The heads of a guest table (``plan.GuestPlan``'s ``plan``, its first ``target_tabled`` functions the target
    module's, planned with prologue rule ``rule``), ``live`` its image (see the module docstring)."""
    kernel, theirs = _kernel_part(plan, target_tabled)
    choice = jumpplan.choose(kernel, vmlinux, rule)
    fires = list(choice.fires)
    traps = dict(choice.traps)
    probes = list(kernel.probes())
    for p in probes:
        n = fires[p.index]
        if not n:
            continue
        last = probes[p.index + n - 1]
        start = kernel.link_address(p)
        size = kernel.link_address(last) + last.length - start
        if live.read(start, size) != vmlinux.read(start, size):
            fires[p.index] = 0
            traps[LIVE_BYTES] = traps.get(LIVE_BYTES, 0) + n  # each displaced probe keeps its breakpoint
    if theirs:
        traps[TARGET] = theirs
    all_fires = (0,) * theirs + tuple(fires)
    heads = sum(1 for n in all_fires if n)
    return GuestJumps(all_fires, heads, sum(all_fires) - heads, dict(sorted(traps.items())))


def states(j: GuestJumps) -> Tuple[str, ...]:
    """Per table probe, what the host planned: "jump", "displaced" or "trap"."""
    out = []
    left = 0
    for n in j.fires:
        if n:
            out.append("jump")
            left = n - 1
        elif left:
            out.append("displaced")
            left -= 1
        else:
            out.append("trap")
    return tuple(out)
