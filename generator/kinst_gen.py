"""``generate --provider kinst``: analysis -> plan -> rendered kinst module sources.

Renders ``templates/kinst/`` into ``sys/modules/kinst/`` (or ``--out``): the
portable core (``kinst_core.[ch]``), the table (``kinst_table.c``), the
FreeBSD glue and the list of refusals.  The user-space harness renders the
same core and table with its own glue (``generator/harness.py``).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import struct
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from .image import KernelImage
from .isa import isa_for
from .isa.amd64 import KinstFlag
from .plan import ProbePlan, c_bytes, c_kind, make_plan
from .probes import EXCLUDED_EXCEPTIONS, EXCLUDED_NAMES, EXCLUDED_PREFIXES, analyse
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
        **glue_context(plan),
    }


# ELF e_type values (the 16-bit field at offset 16 of the ELF header).
_ET_EXEC = 2


def c_string(text: str, width: int = 0) -> str:
    """A C string literal: quotes, backslashes, '?' (trigraphs) and non-printable bytes escaped.

    With ``width``, long text becomes adjacent literals of about that many
    characters, broken after spaces, one per continuation line (style(9)).
    """

    def escape(part: str) -> str:
        out = []
        for b in part.encode("utf-8"):
            ch = chr(b)
            if ch in '"\\?':
                out.append("\\" + ch)
            elif 0x20 <= b < 0x7F:
                out.append(ch)
            else:
                out.append(f"\\{b:03o}")
        return "".join(out)

    if not width:
        return f'"{escape(text)}"'
    pieces, cur = [], ""
    for word in re.findall(r"\S+\s*|\s+", text):
        w = escape(word)
        if cur and len(cur) + len(w) > width:
            pieces.append(cur)
            cur = ""
        cur += w
    pieces.append(cur)
    return "\n\t    ".join(f'"{p}"' for p in pieces)


def linker_names(image: str) -> Tuple[str, str, bool]:
    """(lf->filename, DTrace module name, is a kernel) for the image a table was made from.

    FreeBSD names the kernel's linker file "kernel" and a module's by its file
    name; DTrace module names drop ".ko" (fbt, and dtrace_module_unloaded()
    when it removes a module's probes).
    """
    with open(image, "rb") as f:
        head = f.read(18)
    e_type = struct.unpack_from("<H", head, 16)[0] if len(head) == 18 else 0
    if e_type == _ET_EXEC:
        return "kernel", "kernel", True
    name = os.path.basename(image)
    return name, name[:-3] if name.endswith(".ko") and len(name) > 3 else name, False


def glue_context(plan: ProbePlan) -> Dict[str, Any]:
    """What kinst_glue.c.j2 needs beyond the table: names, lookup order, exclusions."""
    file_name, dtrace_module, is_kernel = linker_names(plan.image)
    names = [f.name for f in plan.funcs]
    # The anchor gives the load bias: a global function (its name is unique in
    # the image), else one whose name is unique in the table.
    anchor = next((i for i, f in enumerate(plan.funcs) if f.qualified == f.name), -1)
    if anchor < 0:
        anchor = next((i for i, n in enumerate(names) if names.count(n) == 1), -1)
    md = isa_for(plan.arch).MD_EXCLUDED
    excluded_names = {**EXCLUDED_NAMES, **(md if isinstance(md, dict) else {n: "listed by the ISA" for n in md})}
    return {
        "module_file": file_name,
        "module_file_c": c_string(file_name),
        "dtrace_module": dtrace_module,
        "dtrace_module_c": c_string(dtrace_module),
        "table_is_kernel": int(is_kernel),
        "anchor": anchor,
        "anchor_name": names[anchor] if anchor >= 0 else "none",
        # strcmp() order: bytes, then index so that equal names keep table order.
        "byname": sorted(range(len(names)), key=lambda i: (names[i].encode("utf-8"), i)),
        "excluded_names": [{"name": c_string(n), "why": c_string(w, 56)} for n, w in sorted(excluded_names.items())],
        "excluded_prefixes": [{"name": c_string(p), "why": c_string(w, 56)} for p, w in EXCLUDED_PREFIXES],
        "excluded_exceptions": [c_string(e) for e in EXCLUDED_EXCEPTIONS],
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
