"""``generate --provider kinst``: analysis -> plan -> rendered kinst module sources.

Renders ``templates/kinst/`` into ``sys/modules/kinst/`` (or ``--out``): the
portable core (``kinst_core.[ch]``), the table (``kinst_table.c``), the
FreeBSD glue and the list of refusals.  The user-space harness renders the
same core and table with its own glue (``generator/harness.py``).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any, Dict, List, Sequence

from .image import KernelImage
from .isa import isa_for
from .isa.amd64 import KinstFlag
from .plan import ProbePlan, c_bytes, c_kind, make_plan
from .probes import analyse
from .records import TABLE_KINDS
from .render import REPO, Input, render_tree

DEFAULT_OUT = REPO / "sys" / "modules" / "kinst"
CORE_TEMPLATES = ("kinst_core.h.j2", "kinst_core.c.j2", "kinst_table.c.j2", "kinst_refused.txt.j2")

_FLAG_DOCS = {
    KinstFlag.CALL: "instruction is a call",
    KinstFlag.DIRECT_CALL: "call rel32",
    KinstFlag.RIPREL: "position-dependent: rel32 rewritten in the trampoline",
    KinstFlag.JMP: "a jump",
    KinstFlag.MOD_DIRECT: "call operand is a register, not memory",
}


def build_plan(kernel: str, functions: Sequence[str], all_functions: bool, rule: str = "any") -> ProbePlan:
    img = KernelImage.open(kernel)
    isa = isa_for(img.arch)
    funcs = img.functions() if all_functions else [img.lookup(f) for f in functions]
    return make_plan(img, [analyse(img, f, rule, isa) for f in funcs])


def context(plan: ProbePlan) -> Dict[str, Any]:
    """Template variables: every value pre-formatted, so templates stay logic-free."""
    from .isa import amd64

    funcs = [
        {"name": f.name, "addr": f"{f.address:#x}", "size": f.size, "first": f.first, "count": f.count}
        for f in plan.funcs
    ]
    entries = [
        {
            "probe": f"{plan.funcs[e.func].qualified}:{e.offset}",
            "func": e.func,
            "offset": e.offset,
            "kind": c_kind(e.kind),
            "flags": f"{e.flags:#04x}",
            "instlen": e.instlen,
            "tinstlen": e.tinstlen,
            "dispoff": e.dispoff,
            "reg1": e.reg1,
            "reg2": e.reg2,
            "scale": e.scale,
            "disp": e.disp,
            "orig": c_bytes(e.orig),
            "template": c_bytes(e.template),
        }
        for e in plan.entries
    ]
    return {
        "image": plan.image,
        "build_id": plan.build_id,
        "funcs": funcs,
        "entries": entries,
        "refused": plan.refused,
        "refused_count": len(plan.refused),
        "patchval": amd64.PATCHVAL,
        "tramp_size": amd64.TRAMP_SIZE,
        "flags": [{"name": f"KINST_F_{f.name}", "value": int(f), "doc": _FLAG_DOCS[f]} for f in KinstFlag],
        "kinds": [{"name": c, "value": i, "doc": doc} for i, (_, c, doc) in enumerate(TABLE_KINDS)],
    }


def command_line(kernel: str, functions: Sequence[str], all_functions: bool) -> str:
    """The canonical command for the header: inputs only, never the output directory."""
    words = ["python", "-m", "generator", "generate", "--provider", "kinst", "--kernel", kernel]
    words += ["--all"] if all_functions else [w for f in functions for w in ("--function", f)]
    return " ".join(shlex.quote(w) for w in words)


def render_plan(plan: ProbePlan, out: Path, command: str, only: Sequence[str] = ()) -> List[Path]:
    inputs = [Input(plan.image, plan.build_id, plan.sha256)]
    return render_tree("kinst", out, context(plan), inputs, command, only=only)


def generate(args: argparse.Namespace) -> int:
    from .cli import DEFAULT_FUNCTION, resolve_kernel

    kernel = resolve_kernel(args.kernel)
    functions = args.function or ([] if args.all else [DEFAULT_FUNCTION])
    plan = build_plan(kernel, functions, args.all)
    out = Path(args.out) if args.out else DEFAULT_OUT
    paths = render_plan(plan, out, command_line(kernel, functions, args.all))
    print(f"{len(plan.entries)} probes in {len(plan.funcs)} functions, {len(plan.refused)} refused")
    for p in paths:
        print(p)
    return 0
