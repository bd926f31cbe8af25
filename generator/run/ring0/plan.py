"""The ring-0 guest's table: the chosen functions of the live kernel, kinst's rules and the kernel's own.

``plan_guest()`` takes function names as a user writes them (``pipe_read``;
``name@file`` for one local copy; a name several files define locally means
every copy), refuses what the kernel's rules refuse (``rules.py``: whole
functions with their reason), plans the rest with the generator's own
``make_plan`` on the live image (kinst's classifier and exclusions), and
then refuses and masks the instruction sites the kernel's tables name.  The
result is an ordinary ``ProbePlan``: the same generated table kinst.ko is
built from, rendered by the same templates.

A name the kernel lacks may be a function of the target module
(``target.py``): planned from its ``.ko`` with the module loader's rules, at
the ``.ko``'s own (low, synthetic) addresses, and put before the kernel's
functions, so that one table, in address order, holds both.

The prologue rule: the guest plans with ``none`` by default.  kinst's rule
(a ``push %rbp`` somewhere in the function) is a heuristic against tracing
exception handlers written in assembly; Linux builds without frame pointers
(its unwinder is ORC), so half of its functions have no ``push %rbp`` at
all, while the code the heuristic guards against is exactly what the kernel
marks itself (``.entry.text``, ``.noinstr.text``, ``.irqentry.text``, the
kprobe blacklist) and ``rules.py`` refuses.  Nothing in the guest walks
frame pointers.  ``--prologue-rule any`` or ``first`` plans as kinst would.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ... import isa as isa_registry
from ...analysis.plan import PlanFunc, ProbePlan, Refusal, digest, make_plan
from ...common.defaults import PROLOGUE_NONE
from ...common.errors import UserError
from ...image.elf import Function, KernelImage
from . import target as target_mod
from .rules import KernelRules, by_function

GUEST_PROLOGUE_RULE = PROLOGUE_NONE
_WIDTHS = (8, 4, 2, 1)


@dataclass(frozen=True)
class GuestPlan:
    """A guest table and how it came about."""

    plan: ProbePlan  # what the module is built from
    requested: Tuple[str, ...]  # the names asked for
    functions: int  # functions those names matched (every local copy)
    refused_by_kernel: int  # whole functions the kernel's rules refused
    sites_refused: int  # instructions refused for a site in the kernel's tables
    rule: str  # the prologue rule it was planned with
    target_functions: int = 0  # of ``functions``, those of the target module
    target_tabled: int = 0  # of ``plan.funcs``, the first ones are the target module's


def _by_name(img: KernelImage) -> Dict[str, List[Function]]:
    by_name: Dict[str, List[Function]] = {}
    for f in img.functions():
        for n in (f.name, *f.aliases):
            by_name.setdefault(n, []).append(f)
    return by_name


def select(img: KernelImage, names: Iterable[str],
           other: Optional[KernelImage] = None) -> Tuple[List[Function], Tuple[str, ...], List[Function]]:
    """Every function each name means (all local copies of a name), in address order; the names; and the
    functions of ``other`` (the target module) that names the kernel lacks mean."""
    by_name = _by_name(img)
    by_other = _by_name(other) if other is not None else {}
    chosen: Dict[int, Function] = {}
    theirs: Dict[int, Function] = {}
    asked = []
    for spec in names:
        spec = spec.strip()
        if not spec or spec.startswith("#"):
            continue
        asked.append(spec)
        name, _, file = spec.partition("@")
        into = chosen
        cands = by_name.get(name, [])
        if not cands:
            into, cands = theirs, by_other.get(name, [])
        if file:
            cands = [f for f in cands if f.file == file]
        if not cands:
            raise UserError(f"{img.path}: no function '{spec}' in the kernel's text (name it as in System.map, "
                            "name@file for one local copy)" + (f" nor in {other.path}" if other else ""))
        for f in cands:
            into[f.address] = f
    if not asked:
        raise UserError("no functions named: give --function F or --functions-from FILE")
    return (sorted(chosen.values(), key=lambda f: f.address), tuple(asked),
            sorted(theirs.values(), key=lambda f: f.address))


def _cover(off: int, length: int) -> List[Tuple[int, int]]:
    """``[off, off + length)`` as fields of 8, 4, 2 and 1 bytes (the widths a table mask has)."""
    out = []
    for w in _WIDTHS:
        while length >= w:
            out.append((off, w))
            off += w
            length -= w
    return out


def restrict(plan: ProbePlan, img: KernelImage, sites: Dict[int, Dict[int, Tuple[bool, str]]]) -> Tuple[ProbePlan, int]:
    """``plan`` with every instruction that holds a site of ``sites`` refused (and masked in the digest
    where the kernel rewrites it); functions left without a probe drop out.  Also the count refused."""
    isa = isa_registry.by_name(plan.arch)
    funcs: List[PlanFunc] = []
    refused = list(plan.refused)
    first = n_sites = 0
    for pf in plan.funcs:
        mine = sites.get(pf.address, {})
        if not mine:
            funcs.append(pf._replace(first=first))
            first += pf.probes
            continue
        records = bytearray()
        masks: List[Tuple[int, int]] = []
        probes = 0
        for ins in isa.stream_decode(pf.records, pf.size):
            hits = sorted(o for o in mine if ins.offset <= o < ins.offset + ins.length)
            kind, local = ins.kind, list(ins.masks)  # a module's relocated fields stay masked
            masks += [(ins.offset + o, w) for o, w in ins.masks]
            if hits:
                masked = any(mine[o][0] for o in hits)
                if kind is not None:
                    refused.append(Refusal(pf.qualified, ins.offset, mine[hits[0]][1]))
                    n_sites += 1
                kind = None
                if masked:
                    local = [(o - ins.offset, w) for o, w in _cover(ins.offset, ins.length)]
                    masks = [m for m in masks if not ins.offset <= m[0] < ins.offset + ins.length]
                    masks += _cover(ins.offset, ins.length)
            records += isa.stream_record(ins.length, kind, ins.dispoff if kind else 0, tuple(local))
            probes += kind is not None
        if probes:
            d = digest(img.read(pf.address, pf.size), masks)
            funcs.append(pf._replace(records=bytes(records), digest=d, first=first, probes=probes))
            first += probes
    return dataclasses.replace(plan, funcs=tuple(funcs), refused=tuple(refused)), n_sites


def plan_target(ko: KernelImage, funcs: Sequence[Function], rule: str) -> Tuple[ProbePlan, int]:
    """The target module's part of the table; and the instruction sites its rules refused."""
    whole, sites = target_mod.loader_rules(ko)
    span = target_mod.probed_range(ko)
    refused: List[Refusal] = []
    ok: List[Function] = []
    for f in funcs:
        why = target_mod.refusal(f, whole, span)
        if why:
            refused.append(Refusal(f.qualified, -1, why))
        else:
            ok.append(f)
    plan = make_plan(ko, ok, rule, fast=False)
    plan, n_sites = restrict(plan, ko, by_function(sites, ok))
    return dataclasses.replace(plan, refused=tuple(refused) + plan.refused), n_sites


def plan_guest(img: KernelImage, rules: KernelRules, names: Sequence[str],
               rule: str = GUEST_PROLOGUE_RULE, target: Optional[KernelImage] = None) -> GuestPlan:
    """The guest's table for ``names`` of the live image ``img`` and of the ``target`` module's .ko (see the
    module docstring)."""
    funcs, asked, theirs = select(img, names, target)
    ok: List[Function] = []
    kernel_refused: List[Refusal] = []
    for f in funcs:
        why = rules.function_reason(f)
        if why:
            kernel_refused.append(Refusal(f.qualified, -1, why))
        else:
            ok.append(f)
    # The capstone path: the accelerators' summaries know kinst's two prologue rules only.
    plan = make_plan(img, ok, rule, fast=False)
    plan, n_sites = restrict(plan, img, by_function(rules.sites, ok))
    plan = dataclasses.replace(plan, refused=tuple(kernel_refused) + plan.refused)
    tabled = 0
    if theirs:
        assert target is not None
        part, more = plan_target(target, theirs, rule)
        n = part.nprobes
        plan = dataclasses.replace(plan, funcs=part.funcs + tuple(f._replace(first=f.first + n) for f in plan.funcs),
                                   refused=part.refused + plan.refused)
        n_sites, tabled = n_sites + more, len(part.funcs)
    return GuestPlan(plan, asked, len(funcs) + len(theirs), len(kernel_refused), n_sites, rule, len(theirs), tabled)


def empty_plan(img: KernelImage) -> ProbePlan:
    """A table with no function: the module the capture boot loads to read the text back."""
    return ProbePlan(arch=img.isa.name, image=img.path, e_type=img.e_type, build_id=img.build_id or "",
                     sha256=img.sha256(), funcs=(), refused=())
