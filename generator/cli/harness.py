"""``harness``: run a command plain and with every table probe of an ELF placed; compare."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from . import args as A
from ..common.defaults import RUN_TIMEOUT
from ..common.errors import UserError


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "harness",
        help="run a command twice, plain and with every table probe of an ELF placed; compare",
        description=(
            "Render the kinst core and table for ELF with a user-space glue, compile it into an LD_AUDIT "
            "library, run COMMAND plain and probed, and fail unless stdout, stderr and the exit status are "
            "identical."
        ),
    )
    p.add_argument("--elf", required=True, help="the program or shared library to probe")
    p.add_argument("--table-from", help="make the table from this object (a .ko-style ld -r object, or another "
                   "build of the same code) and place it in --elf function by function, by name and size")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--function", action="append", default=[], help="a function to probe (repeatable)")
    which.add_argument("--all", action="store_true", help="every eligible instruction of every function")
    A.add_prologue_rule(p)
    p.add_argument("--jump", action="store_true", help="a jump to a detour instead of a breakpoint wherever the "
                   "ahead-of-time proof allows (ISAs with jump probes; docs/jump-probes.md), breakpoints elsewhere")
    p.add_argument("--json", action="store_true", help="one JSON object: probes placed, hits, hits per emulation "
                   "class, refusals, identical runs")
    p.add_argument(
        "--verify", action="store_true",
        help="also run COMMAND under valgrind --tool=callgrind and require every probe's hits to equal its count",
    )
    p.add_argument("--timeout", type=float, default=RUN_TIMEOUT, help=f"seconds per run (default: {RUN_TIMEOUT:g})")
    p.add_argument("--command", dest="command_line",
                   help="the command as one shell-quoted string (instead of giving it after --)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    p.set_defaults(run=cmd_harness)


def cmd_harness(args: argparse.Namespace) -> int:
    from ..run.harness import run_harness, text_report

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.command_line:
        if command:
            raise UserError("give the command either with --command or after --, not both")
        command = shlex.split(args.command_line)
    if not args.function and not args.all:
        raise UserError("name the probes: --function F (repeatable) or --all")
    res = run_harness(args.elf, command, args.function, args.all, verify=args.verify, timeout=args.timeout,
                      table_from=args.table_from, rule=args.prologue_rule, jump=args.jump)
    if args.json:
        sys.stdout.write(json.dumps(res.to_json(), indent=None, sort_keys=False) + "\n")
    else:
        sys.stdout.write(text_report(res))
    return 0 if res.ok else 1
