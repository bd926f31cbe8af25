"""Command line of the dtmalloc side: ``malloc-types``, ``dscript`` and ``generate --provider dtmalloc``.

``generator/cli.py`` calls ``add_commands`` to hang the subcommands on its
parser and ``generate`` for ``generate --provider dtmalloc``.  Each handler
takes the parsed arguments and returns an exit status; bad input raises
``UserError``, which the main CLI prints as one line (exit 2).  Warnings --
a ks_version mismatch, an unregistered malloc_type-shaped object -- go to
stderr and do not change the exit status.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

from . import dscript
from .mallocs import Discovery, MallocType, discover

COLUMNS = ("PROBE", "SYMBOL", "BINDING", "FILE", "ADDRESS", "SHORTDESC")
MAX_WIDTH = 40  # a longer cell overflows its column rather than widening every row


def add_commands(sub) -> None:
    """Add ``malloc-types`` and ``dscript`` to the main parser's subcommands."""
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
    dscript.add_command(sub)


def _discover(args: argparse.Namespace) -> Discovery:
    from .cli import resolve_kernel

    return discover(resolve_kernel(args.kernel), args.module)


def cmd_malloc_types(args: argparse.Namespace) -> int:
    d = _discover(args)
    _warn(d.warnings)
    if args.json:
        out = [json.dumps(type_dict(t), separators=(",", ":")) for t in d.types]
    elif args.list:
        from .dtmalloc_gen import listing_lines

        out = listing_lines(d)
    else:
        out = text_lines(d)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _warn(warnings: Sequence[str]) -> None:
    for w in warnings:
        sys.stderr.write(f"warning: {w}\n")


def type_dict(t: MallocType) -> Dict[str, Any]:
    """The JSON object of one type: the documented keys, plus the conditional ones where they apply."""
    out: Dict[str, Any] = {
        "name": t.name,
        "probe": t.probe,
        "symbol": t.symbol,
        "binding": t.binding,
        "file": t.file,
        "address": t.address,
    }
    if t.duplicate_of is not None:
        ref = t.duplicate_of
        out["duplicate_of"] = {"symbol": ref.symbol, "file": ref.file, "address": ref.address}
    if t.version_mismatch:
        out["version_mismatch"] = {"found": t.ident, "expected": t.expected_ident}
    return out


def header_line(d: Discovery) -> str:
    lay = d.layout
    rel = d.version.release
    where = f"osreldate {d.version.osreldate}" if d.version.osreldate is not None else "from its layouts"
    return (
        f"{d.kernel}: {rel} ({where}); struct malloc_type {lay.malloc_type.name} {lay.ident}, "
        f"{lay.malloc_type.size} bytes; struct sysinit {lay.sysinit.name}, {lay.sysinit.size} bytes"
    )


def _file(path: str, d: Discovery) -> str:
    """The kernel is named in the header line; modules by the path given."""
    return "kernel" if path == d.kernel else path


def _row(t: MallocType, d: Discovery) -> List[str]:
    return [
        f"dtmalloc::{t.probe}:",
        t.qualified,
        t.binding or "-",
        _file(t.file, d),
        f"{t.address:#x}",
        json.dumps(t.name),
    ]


def _notes(t: MallocType, d: Discovery) -> List[str]:
    out = []
    if t.version_mismatch:
        out.append(
            f"    ks_version mismatch: {t.ident}, the kernel expects {t.expected_ident}; malloc_init() panics on it"
        )
    if t.duplicate_of is not None:
        w = next(x for x in d.types if x.ref() == t.duplicate_of)
        out.append(f"    duplicate probe name: stock dtmalloc gives dtmalloc::{t.probe}: to {w.qualified} in {_file(w.file, d)}")
    return out


def text_lines(d: Discovery) -> List[str]:
    """A table in registration order, a note under each flagged type, and a summary."""
    rows = [list(COLUMNS)] + [_row(t, d) for t in d.types]
    widths = [min(MAX_WIDTH, max(len(r[i]) for r in rows)) for i in range(len(COLUMNS) - 1)]
    lines = [header_line(d)]
    lines.append(_format(rows[0], widths))
    for t, row in zip(d.types, rows[1:]):
        lines.append(_format(row, widths))
        lines += _notes(t, d)
    dups = sum(1 for t in d.types if t.duplicate_of is not None)
    bad = sum(1 for t in d.types if t.version_mismatch)
    files = 1 + len(d.modules)
    lines.append(
        f"{len(d.types)} malloc types in {files} file{'s' if files > 1 else ''}: {len(d.probed)} probe names, "
        f"{dups} duplicate{'' if dups == 1 else 's'}, {bad} ks_version mismatch{'' if bad == 1 else 'es'}"
    )
    return lines


def _format(row: Sequence[str], widths: Sequence[int]) -> str:
    cells = [c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]
    return "  ".join(cells).rstrip()


def _command_line(args: argparse.Namespace, kernel: str) -> str:
    words = ["python", "-m", "generator", "generate", "--provider", "dtmalloc", "--kernel", kernel]
    for m in args.module:
        words += ["--module", m]
    if args.out:
        words += ["--out", args.out]
    return " ".join(shlex.quote(w) for w in words)


def generate(args: argparse.Namespace) -> int:
    """``generate --provider dtmalloc``: render the provider for the target kernel."""
    from . import dtmalloc_gen
    from .cli import resolve_kernel
    from .errors import UserError

    if args.function or args.all:
        raise UserError("--function and --all are kinst options; dtmalloc takes --kernel and --module")
    kernel = resolve_kernel(args.kernel)
    d = discover(kernel, args.module)
    dtmalloc_gen.target_release(d)
    _warn(d.warnings)
    out_dir = Path(args.out) if args.out else dtmalloc_gen.default_out()
    written = dtmalloc_gen.generate(d, out_dir, _command_line(args, kernel))
    for p in written:
        sys.stdout.write(f"{p}\n")
    return 0
