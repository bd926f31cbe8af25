"""``generate``: render a provider module's sources from templates/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from generator.common.defaults import DEFAULT_FUNCTION, DEFAULT_PROVIDER, PROVIDER_NAMES
from generator.common.errors import UserError


def add_parsers(sub) -> None:
    ge = sub.add_parser("generate", help="render a provider module's C sources from templates/")
    ge.add_argument("--provider", choices=PROVIDER_NAMES, default=DEFAULT_PROVIDER,
                    help=f"which provider (default: {DEFAULT_PROVIDER})")
    ge.add_argument("--kernel", help="kernel image (default: the embedded sample kernel)")
    ge.add_argument("--module", action="append", default=[], help="dtmalloc: a .ko whose contents to include (repeatable)")
    gwhich = ge.add_mutually_exclusive_group()
    gwhich.add_argument("--function", action="append", default=[],
                        help=f"kinst: a function to table (repeatable; default: {DEFAULT_FUNCTION})")
    gwhich.add_argument("--all", action="store_true", help="kinst: every eligible function")
    ge.add_argument("--out", help="output directory (default: sys/modules/<provider>/)")
    ge.set_defaults(run=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    from generator.image import resolve_kernel

    kernel = resolve_kernel(args.kernel)
    out = Path(args.out) if args.out else None
    if args.provider == "kinst":
        from generator.providers import kinst

        if args.module:
            raise UserError("--module is a dtmalloc option; kinst tables one image, named with --kernel")
        functions = args.function or ([] if args.all else [DEFAULT_FUNCTION])
        plan, paths = kinst.generate(kernel, functions, args.all, out)
        sys.stdout.write(f"{plan.nprobes} probes in {len(plan.funcs)} functions, {len(plan.refused)} refused\n")
    else:
        from generator.providers.dtmalloc import generate as dtmalloc

        if args.function or args.all:
            raise UserError("--function and --all are kinst options; dtmalloc takes --kernel and --module")
        d = dtmalloc.discover_for(kernel, args.module)
        for w in d.warnings:
            sys.stderr.write(f"warning: {w}\n")
        paths = dtmalloc.render(d, out)
    for p in paths:
        sys.stdout.write(f"{p}\n")
    return 0
