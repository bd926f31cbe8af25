"""Ready-to-run D scripts for dtmalloc and kinst, and a checker for the D they are written in.

``python -m generator dscript NAME [...]`` renders ``templates/dscript/NAME.d.j2``
(the command line prints it, or writes it, executable, with ``--out``):

* ``dtmalloc-count [--type T]``: allocations and frees counted by type;
* ``dtmalloc-sizes [--type T]``: a size quantize per type;
* ``kinst-trace --function F [--offset N]``: every hit of one instruction (or
  of all of a function's), with a per-offset count;
* ``kinst-line FILE:LINE``: every hit of a source line, one ``kinst::CALLER:OFFSET``
  clause per probe site (``analysis.lines``), in every function and inlined copy;
* ``kinst-inline NAME``: entry and return of every inlined copy of a function,
  at the offsets kinst's own inline tracing would rewrite ``kinst::NAME:entry``
  and ``:return`` into (``analysis.inlines``), and ``fbt`` for its out-of-line
  definition.  Stock dtrace(1) and the stock kinst of FreeBSD 14 and 15 run
  both; the header names the kernel build-id the offsets belong to.

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
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from ..common.defaults import DEFAULT_PROLOGUE_RULE
from ..common.errors import UserError
from ..image import open_image, open_kernel

if TYPE_CHECKING:
    from ..render import Input

# Bytes allowed literally in the function part of a generated probe
# description; any other byte becomes the one-character glob '?'.
_LITERAL = re.compile(rb"[A-Za-z0-9_.$-]")


class Request(NamedTuple):
    """What to write: the script and the names it is about."""

    script: str  # a key of SCRIPTS
    type: Optional[str] = None  # dtmalloc: one malloc type, by short description or probe name
    function: Optional[str] = None  # kinst-trace: the function
    offset: Optional[int] = None  # kinst-trace: one instruction offset
    kernel: Optional[str] = None  # kinst-trace: the image to check against; dtmalloc: check --type here
    module: Tuple[str, ...] = ()  # dtmalloc: .ko files for the --type check
    target: Optional[str] = None  # kinst-line: FILE:LINE; kinst-inline: the inline function's name
    debug: Optional[str] = None  # kinst-line, kinst-inline: the kernel's separate debug file
    prologue_rule: str = DEFAULT_PROLOGUE_RULE  # kinst scripts: kinst's frame-pointer rule the sites are judged by
    prints: Tuple[str, ...] = ()  # kinst-line: variables (VAR, VAR->member) to print at every site


class Script(NamedTuple):
    """One script kind: its template and how its context is built from the request."""

    template: str
    help: str
    build: Callable[[Request], Dict[str, Any]]


def d_function_part(probe: bytes) -> str:
    """A probe function name as it may appear unquoted in a D probe description."""
    return "".join(chr(b) if _LITERAL.fullmatch(bytes([b])) else "?" for b in probe)


def d_string(text: str) -> str:
    """A D string literal of ``text``: printable ASCII kept (quote and backslash escaped), anything else '?'."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append("?")
    return '"' + "".join(out) + '"'


def _no_target(args: Request) -> None:
    if args.target is not None or args.debug is not None:
        raise UserError(f"{args.script} takes no FILE:LINE or NAME and no --debug; those are for kinst-line "
                        "and kinst-inline")


def _dtmalloc_context(args: Request) -> Dict[str, Any]:
    from ..providers.dtmalloc.mallocs import probe_bytes

    _no_target(args)
    if args.function or args.offset is not None:
        raise UserError("--function and --offset are for kinst-trace; dtmalloc scripts take --type")
    if not args.type:
        return {"func": "", "what": "every type"}
    func = d_function_part(probe_bytes(args.type.encode()))
    if args.kernel:
        _check_type(args, func)
    return {"func": func, "what": f"probe function {func}"}


def _check_type(args: Request, func: str) -> None:
    from ..providers.dtmalloc.mallocs import discover

    d = discover(args.kernel, args.module)
    probes = [t.probe for t in d.probed]
    if not any(fnmatch.fnmatchcase(p, func) for p in probes):
        near = [p for p in probes if func.lower() in p.lower()][:5]
        hint = f"; similar: {', '.join(near)}" if near else "; `malloc-types` lists them"
        raise UserError(f"{args.kernel}: no malloc type has the probe name {func!r}{hint}")


def _kinst_context(args: Request) -> Dict[str, Any]:
    from ..image import resolve_kernel
    from ..analysis.probes import analyse, find_offset

    _no_target(args)
    if args.type:
        raise UserError("--type is for the dtmalloc scripts; kinst-trace takes --function [--offset]")
    if not args.function:
        raise UserError("kinst-trace needs --function NAME")
    kernel = resolve_kernel(args.kernel)
    img = open_image(kernel)
    rep = analyse(img, img.lookup(args.function), args.prologue_rule)
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


def _source_image(args: Request):
    """The kernel, its line and inline index and its DWARF source, for kinst-line and kinst-inline."""
    from ..analysis.indexcache import open_source
    from ..analysis.lines import parse_spec
    from ..common.host import progress_wanted

    if args.type or args.function or args.offset is not None or args.module:
        raise UserError(f"{args.script} takes {'FILE:LINE' if args.script == 'kinst-line' else 'NAME'} "
                        "[--kernel K] [--debug FILE] only")
    if not args.target:
        what = "FILE:LINE" if args.script == "kinst-line" else "the NAME of an inline function"
        raise UserError(f"{args.script} needs {what}")
    if args.prints and args.script != "kinst-line":
        raise UserError("--print is for kinst-line: the variables to print at every site of the line")
    img = open_kernel(args.kernel)
    source = open_source(img, args.debug, progress=progress_wanted())
    if args.script == "kinst-line":
        return img, source.for_line(*parse_spec(args.target)), source
    return img, source.for_all(lines=False), source


def _clause(function: Optional[str], offset: Optional[int], status: str) -> Optional[str]:
    """``kinst::FUNCTION:OFFSET`` for a site kinst traces and D can spell; None otherwise."""
    if status != "ok" or function is None or offset is None:
        return None
    spelled = d_function_part(function.encode())
    return f"kinst::{spelled}:{offset}" if spelled == function else None


def _refusal(function: Optional[str], offset: Optional[int], status: str, reason: str) -> str:
    where = f"{function}+{offset}" if function is not None and offset is not None else "(no symbol)"
    if status == "ok":
        reason = "its name has characters a D probe description cannot spell"
    return f"{where}: {reason}"


def _header_inputs(img) -> List["Input"]:
    from ..render import Input

    return [Input(img.path, img.build_id or "", img.sha256())]


def _kinst_line_context(args: Request) -> Dict[str, Any]:
    from ..analysis.lines import line_sites

    img, index, source = _source_image(args)
    sites = line_sites(img, index, args.target, args.prologue_rule)
    reader = source.variables(index) if args.prints else None
    named: Dict[str, str] = {}  # the --print specs some site names (a dict: insertion order)
    clauses, refused = [], []
    for s in sites:
        probe = _clause(s.function, s.offset, s.status)
        inl = f", inlined in {' < '.join(s.inlined)}" if s.inlined else ""
        if probe is None:
            refused.append(_refusal(s.function, s.offset, s.status, s.reason))
            continue
        clause = {"probe": probe, "label": d_string(f"{s.function}+{s.offset}"),
                  "comment": f"{s.file}:{s.line} at {s.function}+{s.offset}{inl}", "format": "", "args": [],
                  "values": []}
        if reader is not None:
            clause.update(_printed(reader, s.address, args.prints, named))
        clauses.append(clause)
    if not clauses:
        raise UserError(f"{args.target}: kinst can trace none of its {len(sites)} sites: {refused[0]}")
    unknown = [spec for spec in args.prints if spec not in named]
    if unknown:
        raise UserError(f"--print {unknown[0]}: no variable of that name is in scope at any traceable site of "
                        f"{args.target}; `probes --line {args.target} --vars` lists those that are")
    where = f"{sites[0].file}:{sites[0].line}"
    return {
        "_inputs": _header_inputs(img),
        "where": where,
        "where_d": d_string(where),
        "build_id": img.build_id or "(none)",
        "clauses": clauses,
        "refused": refused,
        "count": f"{len(clauses)} of {len(sites)} site{'s' if len(sites) != 1 else ''}",
    }


def _printed(reader, address: int, prints: Tuple[str, ...], named: Dict[str, str]) -> Dict[str, Any]:
    """The printf format, its arguments and a line per value saying where it comes from, for one site.  A spec
    the site cannot name (not in scope there) prints as unavailable; ``named`` collects those some site names."""
    from ..analysis.ctypes import FLOAT, POINTER

    variables = reader.at(address)
    fmt, argv, notes = [], [], []
    for spec in prints:
        r = reader.reading(variables, spec)
        if r.variable is not None:
            named[spec] = ""
        if not r.d:
            fmt.append(f"{spec}=<unavailable>")
            notes.append(f"{spec}: not available here: {r.reason}")
            continue
        kind = r.ctype.kind
        conv = "%p" if kind == POINTER else "%x" if kind == FLOAT else "%d" if r.ctype.signed else "%u"
        fmt.append(f"{spec}={conv}")
        argv.append(r.d)
        bits = " (the raw bits: D has no floating point)" if kind == FLOAT else ""
        notes.append(f"{spec} ({r.ctype.name}): {r.where}{bits}")
    return {"format": " " + " ".join(fmt), "args": argv, "values": notes}


def _kinst_inline_context(args: Request) -> Dict[str, Any]:
    from ..analysis.inlines import ENTRY, inline_copies

    img, index, _ = _source_image(args)
    copies = inline_copies(img, index, args.target, args.prologue_rule)
    clauses, refused, fbt = [], [], []
    for c in copies:
        if c.caller is None:
            spelled = d_function_part((c.symbol or "").encode())
            if c.symbol and spelled == c.symbol and spelled not in fbt:
                fbt.append(spelled)
            continue
        call = f"called at {c.call_file}:{c.call_line}" if c.call_file else "call site unknown"
        for s in c.sites:
            probe = _clause(s.function, s.offset, s.status)
            if probe is None:
                why = _refusal(s.function, s.offset, s.status, s.reason)
                refused.append(f"{s.role} of the copy in {c.caller}: {why}")
                continue
            clauses.append({"probe": probe, "role": s.role, "aggregation": "entries" if s.role == ENTRY else "returns",
                            "label": d_string(f"{s.role} {s.function}+{s.offset}"),
                            "comment": f"{s.role} of {c.name} inlined in {c.caller}, {call}"})
    if not clauses:
        raise UserError(f"{args.target}: kinst can trace none of the entries and returns of its inlined copies: "
                        f"{refused[0] if refused else 'none found'}")
    ncopies = sum(1 for c in copies if c.caller is not None)
    return {
        "_inputs": _header_inputs(img),
        "name": args.target,
        "name_d": d_string(args.target),
        "build_id": img.build_id or "(none)",
        "clauses": clauses,
        "refused": refused,
        "fbt": fbt,
        "copies": f"{ncopies} inlined cop{'ies' if ncopies != 1 else 'y'}",
        "has_entries": any(c["role"] == ENTRY for c in clauses) or bool(fbt),
        "has_returns": any(c["role"] != ENTRY for c in clauses) or bool(fbt),
    }


SCRIPTS: Dict[str, Script] = {
    "dtmalloc-count": Script("dtmalloc-count.d.j2", "malloc/free counts by malloc type", _dtmalloc_context),
    "dtmalloc-sizes": Script("dtmalloc-sizes.d.j2", "allocation size quantize per malloc type", _dtmalloc_context),
    "kinst-trace": Script("kinst-trace.d.j2", "trace one instruction (or all) of a function", _kinst_context),
    "kinst-line": Script("kinst-line.d.j2", "trace a source line FILE:LINE at every probe site (needs DWARF)",
                         _kinst_line_context),
    "kinst-inline": Script("kinst-inline.d.j2", "trace entry and return of every inlined copy of NAME (needs DWARF)",
                           _kinst_inline_context),
}


def command_line(args: Request) -> str:
    words = ["python -m generator dscript", args.script]
    if args.target is not None:
        words.append(args.target)
    for flag in ("type", "function", "offset", "kernel", "debug"):
        value = getattr(args, flag)
        if value is not None:
            words.append(f"--{flag} {value}")
    if args.prints:
        words.append(f"--print {','.join(args.prints)}")
    words += [f"--module {m}" for m in args.module]
    words += [f"--prologue-rule {args.prologue_rule}"] if args.prologue_rule != DEFAULT_PROLOGUE_RULE else []
    return " ".join(words)


def render(args: Request) -> str:
    """The script text, checked."""
    # Imported here: the command line imports this module for SCRIPTS whenever it builds its parsers.
    from . import syntax as dsyntax
    from ..render import c_header, environment

    script = SCRIPTS[args.script]
    ctx = script.build(args)
    inputs = ctx.pop("_inputs", ())
    name = f"dscript/{script.template}"
    text = environment().get_template(name).render(header=c_header(name, inputs, command_line(args)), **ctx)
    dsyntax.check(text)
    return text
