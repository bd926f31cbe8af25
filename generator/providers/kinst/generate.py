"""``generate --provider kinst``: analysis -> plan -> the generated kinst module sources.

Renders ``templates/kinst/`` into ``sys/modules/kinst/`` (or ``--out``): what
varies with the input image, and nothing else -- the table
(``kinst_table.c``), the image's linker-file name, lookup order and the
exclusion list (``kinst_target.c``), the ISA's encodings
(``kinst_encoding.h``) and the list of refusals.  The C that no input changes
is hand-written and committed beside them: ``kinst.c``, ``kinst.h``,
``kinst_target.h`` and, per ISA, ``<arch>/kinst_isa.c`` and the portable core
``<arch>/kinst_core.[ch]``.  The user-space harness renders the same
encodings and table and compiles them with the same core and its own glue
(``generator/run/harness.py``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import struct
import zlib
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ... import isa as isa_registry
from ...isa import encoding
from ...isa.encoding import FUNC_RECORD
from ...analysis.exclusions import EXCLUDED_EXCEPTIONS, EXCLUDED_PREFIXES, excluded_names
from ...analysis.plan import ProbePlan, make_plan
from ...common.cstring import c_blob
from ...common.defaults import DEFAULT_PROLOGUE_RULE
from ...common.paths import MODULES_OUT, TEMPLATE_DIR
from ...image.elf import KernelImage
from ...render import Input, remove_outdated, render_tree

if TYPE_CHECKING:
    from ...analysis.jumpplan import JumpChoice

DEFAULT_OUT = MODULES_OUT / "kinst"
# What kinstkit generated before the fixed C was committed; removed from the output directory.
OUTDATED = ("kinst_glue.c", "kinst_core.c", "kinst_core.h")
# What the harness renders for the hand-written core: everything but kinst_target.c (module glue data).
CORE_TEMPLATES = ("kinst_encoding.h.j2", "kinst_table.c.j2", "kinst_refused.txt.j2")


def build_plan(img: KernelImage, functions: Sequence[str], all_functions: bool,
               rule: str = DEFAULT_PROLOGUE_RULE, jobs: int = 0) -> ProbePlan:
    """The plan of the named functions of ``img`` (or all of them) under kinst's prologue ``rule``."""
    funcs = img.functions() if all_functions else [img.lookup(f) for f in functions]
    return make_plan(img, funcs, rule, jobs=jobs if all_functions else 1)


def table_digest(func_digest: int, records: bytes) -> int:
    """A function's digest in the table: the plan's digest of its bytes (``plan.digest``) continued over its
    instruction records, so that the module's check (``kinst_func_digest_ok()``) covers both."""
    crc, adler = func_digest >> 32, func_digest & 0xFFFFFFFF
    return zlib.crc32(records, crc) << 32 | zlib.adler32(records, adler)


def table_blobs(plan: ProbePlan) -> Dict[str, bytes]:
    """The table's four blobs: function records, their order by name, the names, the instruction records."""
    names = bytearray()
    name_at: Dict[str, int] = {}
    records = bytearray()
    funcs = bytearray()
    for f in plan.funcs:
        if f.name not in name_at:
            name_at[f.name] = len(names)
            names += f.name.encode("utf-8") + b"\0"
        funcs += FUNC_RECORD.pack(f.address, table_digest(f.digest, f.records), f.size, name_at[f.name],
                                  len(records), f.first)
        records += f.records
    keys = [f.name.encode("utf-8") for f in plan.funcs]
    # strcmp() order: bytes, then index so that equal names keep table order.
    byname = sorted(range(len(keys)), key=lambda i: (keys[i], i))
    return {"funcs": bytes(funcs), "byname": struct.pack(f"<{len(byname)}I", *byname), "names": bytes(names),
            "records": bytes(records)}


def context(plan: ProbePlan, jump: Optional["JumpChoice"] = None) -> Dict[str, Any]:
    """Template variables: every value pre-formatted, so templates stay logic-free.  ``jump``: the table
    carries, per probe, how many probes its detour fires (0: a breakpoint; ``analysis/jumpplan.py``)."""
    isa = isa_registry.by_name(plan.arch)
    blobs = table_blobs(plan)
    return {
        "jump_blob": "" if jump is None else c_blob(bytes(jump.fires)),
        "jump_heads": 0 if jump is None else jump.heads,
        "jump_probes": 0 if jump is None else jump.jumped,
        "image": plan.image,
        "build_id": plan.build_id,
        "nfuncs": len(plan.funcs),
        "nprobes": plan.nprobes,
        **{f"{k}_blob": c_blob(v) for k, v in blobs.items()},
        **{f"{k}_size": len(v) for k, v in blobs.items()},
        "refused": plan.refused,
        "refused_count": len(plan.refused),
        **encoding.context(isa),
        **glue_context(plan, dict(plan.md_excluded) or isa.md_excluded),
    }


def linker_names(plan: ProbePlan) -> Tuple[str, str, bool]:
    """(lf->filename, DTrace module name, is a kernel) for the image a table was made from.

    FreeBSD names the kernel's linker file "kernel" and a module's by its file
    name, and stock kinst names its probes' module ``lf->filename``
    (``kinst:foo.ko:func:off``), so the DTrace module name is the file name,
    ".ko" included.  (fbt drops ".ko"; a D script written for stock kinst
    names the file.)
    """
    if plan.e_type == "ET_EXEC":
        return "kernel", "kernel", True
    name = os.path.basename(plan.image)
    return name, name, False


def glue_context(plan: ProbePlan, md_excluded: Mapping[str, str]) -> Dict[str, Any]:
    """What the FreeBSD glue needs beyond the table (``kinst_target.c``): names, lookup order, exclusions."""
    file_name, dtrace_module, is_kernel = linker_names(plan)
    names = [f.name for f in plan.funcs]
    # The anchor gives the load bias: a global function (its name is unique in
    # the image), else one whose name is unique in the table.
    anchor = next((i for i, f in enumerate(plan.funcs) if f.qualified == f.name), -1)
    if anchor < 0:
        counts = Counter(names)
        anchor = next((i for i, n in enumerate(names) if counts[n] == 1), -1)
    return {
        "module_file": file_name,
        "dtrace_module": dtrace_module,
        "table_is_kernel": int(is_kernel),
        "anchor": anchor,
        "anchor_name": names[anchor] if anchor >= 0 else "none",
        "excluded_names": [{"name": n, "why": w} for n, w in sorted(excluded_names(md_excluded).items())],
        "excluded_prefixes": [{"name": p, "why": w} for p, w in EXCLUDED_PREFIXES],
        "excluded_exceptions": list(EXCLUDED_EXCEPTIONS),
    }


def command_line(kernel: str, functions: Sequence[str], all_functions: bool,
                 rule: str = DEFAULT_PROLOGUE_RULE, jump: bool = False) -> str:
    """The canonical command for the header: inputs only, never the output directory."""
    words = ["python", "-m", "generator", "generate", "--provider", "kinst", "--kernel", kernel]
    words += ["--all"] if all_functions else [w for f in functions for w in ("--function", f)]
    words += ["--prologue-rule", rule] if rule != DEFAULT_PROLOGUE_RULE else []
    words += ["--jump"] if jump else []
    return " ".join(shlex.quote(w) for w in words)


def render_plan(plan: ProbePlan, out: Path, command: str, only: Sequence[str] = (),
                jump: Optional["JumpChoice"] = None) -> List[Path]:
    inputs = [Input(plan.image, plan.build_id, plan.sha256)]
    return render_tree("kinst", out, context(plan, jump), inputs, command, only=only)


def core_key_parts(files: Sequence[Path], *template_dirs: str) -> List[bytes]:
    """What a build of the portable core outside ``sys/modules/kinst/`` (the harness library, the ring-0
    module) depends on besides its plan: the kinst templates and ``template_dirs``' own, and ``files``."""
    templates = [t for d in ("kinst", *template_dirs) for t in sorted((TEMPLATE_DIR / d).glob("*.j2"))]
    return [t.read_bytes() for t in templates] + [f.name.encode() + b"\0" + f.read_bytes() for f in files]


def stage_core(plan: ProbePlan, out: Path, command: str, files: Sequence[Path],
               jump: Optional["JumpChoice"] = None) -> None:
    """``files`` copied into ``out`` and the plan's core templates rendered beside them: one directory in which
    every ``#include "..."`` finds this build's files.  ``jump``: the table carries these jump heads
    (``kt_jump``), as ``generate --jump``'s does."""
    for f in files:
        shutil.copyfile(f, out / f.name)
    render_plan(plan, out, command, only=CORE_TEMPLATES, jump=jump)


def generate(img: KernelImage, functions: Sequence[str], all_functions: bool, out: Optional[Path] = None,
             rule: str = DEFAULT_PROLOGUE_RULE,
             jump: bool = False) -> Tuple[ProbePlan, List[Path], Optional["JumpChoice"]]:
    """Analyse ``img``, plan its table and render the module sources into ``out``; with ``jump``, the table
    carries the jump heads the proof allows (``analysis/jumpplan.py``; the default path never runs it)."""
    plan = build_plan(img, functions, all_functions, rule)
    choice = None
    if jump:
        from ...analysis import jumpplan

        choice = jumpplan.choose(plan, img, rule)
    paths = render_plan(plan, out or DEFAULT_OUT, command_line(img.path, functions, all_functions, rule, jump),
                        jump=choice)
    remove_outdated(out or DEFAULT_OUT, OUTDATED)
    return plan, paths, choice
