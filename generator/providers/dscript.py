"""Ready-to-run D scripts for dtmalloc and kinst, and a checker for the D they are written in.

``python -m generator dscript NAME [...]`` renders ``templates/dscript/NAME.d.j2``
(the command line prints it, or writes it, executable, with ``--out``):

* ``dtmalloc-count [--type T]``: allocations and frees counted by type;
* ``dtmalloc-sizes [--type T]``: a size quantize per type;
* ``kinst-trace --function F [--offset N]``: every hit of one instruction (or
  of all of a function's), with a per-offset count.

Names are checked before a script is written: a kinst function and offset
against a kernel image with kinstkit's own probe analysis (the embedded
sample kernel by default), a dtmalloc type against ``--kernel`` when one is
given.  The output is then parsed by ``dsyntax.check``, a small parser for the
subset of D the templates use.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from generator.common.errors import UserError
from generator.providers import dsyntax
from generator.render import c_header, environment

# Bytes allowed literally in the function part of a generated probe
# description; any other byte becomes the one-character glob '?'.
_LITERAL = re.compile(rb"[A-Za-z0-9_.$-]")


@dataclass(frozen=True)
class Request:
    """What to write: the script and the names it is about."""

    script: str  # a key of SCRIPTS
    type: Optional[str] = None  # dtmalloc: one malloc type, by short description or probe name
    function: Optional[str] = None  # kinst-trace: the function
    offset: Optional[int] = None  # kinst-trace: one instruction offset
    kernel: Optional[str] = None  # kinst-trace: the image to check against; dtmalloc: check --type here
    module: Tuple[str, ...] = ()  # dtmalloc: .ko files for the --type check


@dataclass(frozen=True)
class Script:
    """One script kind: its template and how its context is built from the request."""

    template: str
    help: str
    build: Callable[[Request], Dict[str, str]]


def d_function_part(probe: bytes) -> str:
    """A probe function name as it may appear unquoted in a D probe description."""
    return "".join(chr(b) if _LITERAL.fullmatch(bytes([b])) else "?" for b in probe)


def _dtmalloc_context(args: Request) -> Dict[str, str]:
    from generator.providers.dtmalloc.mallocs import probe_bytes

    if args.function or args.offset is not None:
        raise UserError("--function and --offset are for kinst-trace; dtmalloc scripts take --type")
    if not args.type:
        return {"func": "", "what": "every type"}
    func = d_function_part(probe_bytes(args.type.encode()))
    if args.kernel:
        _check_type(args, func)
    return {"func": func, "what": f"probe function {func}"}


def _check_type(args: Request, func: str) -> None:
    from generator.providers.dtmalloc.mallocs import discover

    d = discover(args.kernel, args.module)
    probes = [t.probe for t in d.probed]
    if not any(fnmatch.fnmatchcase(p, func) for p in probes):
        near = [p for p in probes if func.lower() in p.lower()][:5]
        hint = f"; similar: {', '.join(near)}" if near else "; `malloc-types` lists them"
        raise UserError(f"{args.kernel}: no malloc type has the probe name {func!r}{hint}")


def _kinst_context(args: Request) -> Dict[str, str]:
    from generator.image.sample import resolve_kernel
    from generator.image.elf import KernelImage
    from generator.analysis.probes import analyse, find_offset

    if args.type:
        raise UserError("--type is for the dtmalloc scripts; kinst-trace takes --function [--offset]")
    if not args.function:
        raise UserError("kinst-trace needs --function NAME")
    kernel = resolve_kernel(args.kernel)
    img = KernelImage.open(kernel)
    rep = analyse(img, img.lookup(args.function))
    if not rep.eligible:
        raise UserError(f"{rep.qualified}: kinst refuses the whole function: {rep.reason}")
    if args.offset is None:
        ok = sum(1 for p in rep.probes if p.status == "ok")
        return {
            "function": rep.name,
            "offset": "",
            "what": f"every instruction of {rep.name}",
            "checked": f"Checked against {os.path.basename(kernel)}: {ok} of {len(rep.probes)} instructions traceable.",
        }
    p = find_offset(rep, args.offset)
    if p.status != "ok":
        raise UserError(f"kinst::{rep.name}:{p.offset} ({p.mnemonic}) cannot be traced: {p.reason}")
    return {
        "function": rep.name,
        "offset": str(p.offset),
        "what": f"the instruction at {rep.name}+{p.offset} ({p.mnemonic} {p.operands})".replace(" )", ")"),
        "checked": f"Checked against {os.path.basename(kernel)}: a traceable instruction boundary.",
    }


SCRIPTS: Dict[str, Script] = {
    "dtmalloc-count": Script("dtmalloc-count.d.j2", "malloc/free counts by malloc type", _dtmalloc_context),
    "dtmalloc-sizes": Script("dtmalloc-sizes.d.j2", "allocation size quantize per malloc type", _dtmalloc_context),
    "kinst-trace": Script("kinst-trace.d.j2", "trace one instruction (or all) of a function", _kinst_context),
}


def command_line(args: Request) -> str:
    words = ["python -m generator dscript", args.script]
    for flag in ("type", "function", "offset", "kernel"):
        value = getattr(args, flag)
        if value is not None:
            words.append(f"--{flag} {value}")
    words += [f"--module {m}" for m in args.module]
    return " ".join(words)


def render(args: Request) -> str:
    """The script text, checked."""
    script = SCRIPTS[args.script]
    ctx = script.build(args)
    name = f"dscript/{script.template}"
    text = environment().get_template(name).render(header=c_header(name, (), command_line(args)), **ctx)
    dsyntax.check(text)
    return text
