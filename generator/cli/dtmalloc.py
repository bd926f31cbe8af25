"""``malloc-types`` and ``dscript``: the dtmalloc side of the command line, and the D scripts.

Each handler takes the parsed arguments and returns an exit status; bad input
raises ``UserError``, which the main CLI prints as one line (exit 2).
Warnings -- a ks_version mismatch, an unregistered malloc_type-shaped object
-- go to stderr and do not change the exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import args as A


def add_parsers(sub) -> None:
    mt = sub.add_parser(
        "malloc-types",
        help="list the malloc(9) types, and so the dtmalloc::<type>: probes, of a kernel and its modules",
    )
    mt.add_argument("--kernel", help="FreeBSD kernel image (default: the embedded sample kernel)")
    mt.add_argument("--module", action="append", default=[], help="a .ko to include, in load order (repeatable)")
    out = mt.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object per type, one per line")
    out.add_argument("--list", action="store_true", help="the probes as `dtrace -l -P dtmalloc` would list them")
    mt.set_defaults(run=cmd_malloc_types)

    from ..dscript.scripts import SCRIPTS

    ds = sub.add_parser("dscript", help="write a ready-to-run D script (dtmalloc counts or sizes, kinst trace, "
                        "source line or inline function)")
    ds.add_argument("script", choices=sorted(SCRIPTS), help="; ".join(f"{k}: {v.help}" for k, v in SCRIPTS.items()))
    ds.add_argument("target", nargs="?", metavar="FILE:LINE|NAME",
                    help="kinst-line: the source line FILE:LINE; kinst-inline: the inline function's NAME")
    ds.add_argument("--type", help="dtmalloc: one malloc type, by short description or probe name (default: all)")
    ds.add_argument("--function", help="kinst-trace: the function to trace")
    ds.add_argument("--offset", type=A.offset, help="kinst-trace: one instruction offset (default: every instruction)")
    ds.add_argument(
        "--kernel",
        help="kinst-trace, kinst-line, kinst-inline: the kernel the probes are for (default: the sample kernel); "
        "dtmalloc: check --type against this kernel",
    )
    ds.add_argument("--module", action="append", default=[], help="dtmalloc: a .ko for the --type check (repeatable)")
    ds.add_argument("--debug", metavar="FILE", help="kinst-line, kinst-inline: the kernel's separate debug file "
                    "(default: found by build-id, .gnu_debuglink or /usr/lib/debug/<path>.debug)")
    ds.add_argument("--print", dest="print_vars", metavar="VAR[,VAR...]",
                    help="kinst-line: print these variables (VAR, VAR->member, VAR.member) at every site of the line, "
                         "read from the DWARF location each has there")
    A.add_prologue_rule(ds)
    ds.add_argument("--out", help="write the script here (mode 0755) instead of to stdout")
    ds.set_defaults(run=cmd_dscript)


def cmd_malloc_types(args: argparse.Namespace) -> int:
    from ..image import resolve_kernel
    from ..providers.dtmalloc import report
    from ..providers.dtmalloc.generate import listing_lines
    from ..providers.dtmalloc.mallocs import discover

    d = discover(resolve_kernel(args.kernel), args.module)
    for w in d.warnings:
        sys.stderr.write(f"warning: {w}\n")
    if args.json:
        out = [json.dumps(report.type_dict(t), separators=(",", ":")) for t in d.types]
    elif args.list:
        out = listing_lines(d)
    else:
        out = report.text_lines(d)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def cmd_dscript(args: argparse.Namespace) -> int:
    from ..common.files import write_all
    from ..dscript.scripts import Request, render

    prints = tuple(v.strip() for v in args.print_vars.split(",") if v.strip()) if args.print_vars else ()
    req = Request(args.script, args.type, args.function, args.offset, args.kernel, tuple(args.module), args.target,
                  args.debug, args.prologue_rule, prints)
    text = render(req)
    if args.out:
        path = Path(args.out)
        write_all([(path, text)])
        path.chmod(0o755)
    else:
        sys.stdout.write(text)
    return 0
