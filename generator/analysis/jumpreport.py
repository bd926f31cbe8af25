"""``probes --jump``: which probes may be jumps, per function and for a whole image (docs/jump-probes.md).

The proof is ``analysis/jumpsafe.py``'s; here it is run over the analysis'
two walks -- the host library's rows for whole images, the decoder of
record's report for one function -- and counted.  A probe of an eligible
function counts as eligible; a probe kinst refuses is not a jump candidate.
"""

from __future__ import annotations

import functools
import json
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from . import jumpsafe as J
from .exclusions import excluded, for_image
from .jumprefs import for_image as refs_for_image
from .probes import analyse, function_code
from .whole import map_chunks
from ..common.errors import UserError
from ..image.elf import Function, KernelImage
from ..isa import hostcore


class FunctionJumps(NamedTuple):
    """One function's jump verdicts."""

    function: str  # qualified name
    address: int
    size: int
    reason: str  # why the whole function is refused ("" when eligible)
    verdicts: Tuple[J.JumpVerdict, ...]  # one per probe, in offset order


def require(img: KernelImage) -> None:
    """A UserError unless the image's ISA has jump probes."""
    if img.isa.jump is None:
        raise UserError(f"--jump: {img.isa.name} has no jump probes yet (its ISA record has no jump facts); drop --jump")


def of_function(img: KernelImage, func: Function, rule: str, lib: Optional[hostcore.Host] = None) -> FunctionJumps:
    """``func``'s verdicts, from the host library's rows when ``lib`` is given and it takes the function."""
    isa = img.isa
    why = excluded(func.name, isa.name, for_image(img))
    if why:
        return FunctionJumps(func.qualified, func.address, func.size, why, ())
    code = function_code(img, func)
    rows = lib.rows(code, func.size, func.address) if lib is not None and not isa.mapping_symbols else None
    if rows is not None:
        if not rows.prologue & 1 << isa.accelerator.prologue_rules.index(rule):
            return FunctionJumps(func.qualified, func.address, func.size, isa.prologue_reasons[rule], ())
        insns = J.from_rows(rows, code, func.address, isa)
    else:
        rep = analyse(img, func, rule, isa)
        if not rep.eligible:
            return FunctionJumps(func.qualified, func.address, func.size, rep.reason, ())
        insns = J.from_report(rep, code, isa.jump)
    return FunctionJumps(func.qualified, func.address, func.size, "", tuple(J.prove(img, func, insns)))


def _chunk(img: KernelImage, funcs: Sequence[Function], rule: str) -> List[FunctionJumps]:
    lib = hostcore.for_isa(img.isa)
    return [of_function(img, f, rule, lib) for f in funcs]


def of_image(img: KernelImage, rule: str, jobs: int = 0) -> Iterator[List[FunctionJumps]]:
    """Every function's verdicts, chunk by chunk, in address order."""
    require(img)
    funcs = img.functions()
    if not funcs:
        raise UserError(f"{img.path}: no function symbols (stripped image?); use an unstripped kernel or its debug file")
    hostcore.for_isa(img.isa)  # built and loaded before any worker forks
    refs_for_image(img)  # the image-wide scan, likewise
    for_image(img)  # and the exclusion list with the NMI closure
    yield from map_chunks(img, funcs, functools.partial(_chunk, rule=rule), jobs)


def record(fj: FunctionJumps) -> Dict[str, object]:
    """The summary of one function's verdicts: probes, jumps, and the fall-backs counted by reason code."""
    n, why = J.counts(fj.verdicts)
    return {"function": fj.function, "address": fj.address, "size": fj.size, "eligible": not fj.reason,
            "reason": fj.reason, "probes": len(fj.verdicts), "jump": n, "trap": len(fj.verdicts) - n,
            "trap_reasons": dict(sorted(why.items()))}


def summary_json(fj: FunctionJumps) -> str:
    return json.dumps(record(fj), separators=(",", ":"))


def summary_text(fj: FunctionJumps) -> str:
    r = record(fj)
    if fj.reason:
        return f"{fj.function:<32} {fj.address:#x} refused: {fj.reason}"
    why = " ".join(f"{k}={v}" for k, v in r["trap_reasons"].items())
    return f"{fj.function:<32} {fj.address:#x} {r['probes']:>5} probes {r['jump']:>5} jump  {why}".rstrip()


class Totals:
    """Running totals over functions: the whole image's share of jump probes and the reason histogram."""

    def __init__(self) -> None:
        self.probes = 0
        self.jump = 0
        self.why: Dict[str, int] = {}

    def add(self, fj: FunctionJumps) -> None:
        n, why = J.counts(fj.verdicts)
        self.probes += len(fj.verdicts)
        self.jump += n
        for k, v in why.items():
            self.why[k] = self.why.get(k, 0) + v

    def text(self) -> str:
        share = 100.0 * self.jump / self.probes if self.probes else 0.0
        why = " ".join(f"{k}={v}" for k, v in sorted(self.why.items(), key=lambda kv: -kv[1]))
        return f"TOTAL {self.probes} probes in eligible functions, {self.jump} jump ({share:.1f}%); trap: {why}"
