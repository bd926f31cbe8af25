"""``probes``: every kinst probe site of one function, or of the whole image."""

from __future__ import annotations

import argparse
import os
import sys

from . import args as A
from ..common.defaults import DEFAULT_FUNCTION
from ..common.errors import UserError
from ..common.host import progress_wanted
from ..image import open_kernel


def add_parsers(sub) -> None:
    pr = sub.add_parser("probes", help="list kinst probe sites of a function, with kinst's metadata")
    A.add_kernel(pr)
    which = pr.add_mutually_exclusive_group()
    which.add_argument("--function", help=A.FUNCTION_HELP)
    which.add_argument("--all", action="store_true", help="every function of the image")
    which.add_argument("--line", metavar="FILE:LINE",
                       help="every probe site of a source line, in every function and inlined copy "
                            "(FILE matches by the end of its path; needs DWARF)")
    which.add_argument("--inline", metavar="NAME",
                       help="every inlined copy of function NAME: caller, entry and return offsets (kinst's rule), "
                            "call site; and its out-of-line definition (needs DWARF)")
    pr.add_argument("--lines", action="store_true",
                    help="with --function: its source lines with the probe offsets of each, like perf probe -L")
    pr.add_argument("--vars", action="store_true",
                    help="with --line, or --function F --offset N: every parameter and local in scope at each site, "
                         "its C type and where its value is, as a D expression over kinst's regs[] (needs DWARF)")
    pr.add_argument("--debug", metavar="FILE",
                    help="the image's separate debug file (default: the image itself, then its build-id, "
                         ".gnu_debuglink and /usr/lib/debug/<path>.debug)")
    pr.add_argument("--offset", type=A.offset, help="only the instruction at this byte offset")
    pr.add_argument("--json", action="store_true", help="JSON: one object per function (one per line with --all); "
                    "one per site with --line and --lines, one per copy with --inline")
    pr.add_argument(
        "--summary",
        action="store_true",
        help="per function: verdict and probe counts by kind, not every instruction (fast path for whole images)",
    )
    A.add_prologue_rule(pr)
    pr.add_argument("--jobs", type=int, default=0, help="worker processes for --all (default: one per core)")
    pr.set_defaults(run=cmd_probes)


def cmd_probes(args: argparse.Namespace) -> int:
    from ..analysis import report, summary
    from ..analysis.probes import analyse, find_offset

    img = open_kernel(args.kernel)
    if args.vars:
        return _probes_vars(img, args)
    if args.line or args.inline or args.lines:
        return _probes_source(img, args)
    if args.debug:
        raise UserError("--debug is for --line, --inline, --lines and --vars")
    if args.all:
        if args.offset is not None:
            raise UserError("--offset needs --function, not --all")
        return _probes_all(img, args)
    rep = analyse(img, img.lookup(args.function or DEFAULT_FUNCTION), args.prologue_rule)
    if args.summary:
        rec = summary.from_report(rep)
        sys.stdout.write((report.summary_json(rec) if args.json else report.summary_text(rec)) + "\n")
        return 0
    if args.offset is not None:
        find_offset(rep, args.offset)
    out = report.function_json(rep, args.offset) if args.json else report.function_text(rep, args.offset)
    sys.stdout.write(out + "\n")
    return 0


def _probes_all(img, args: argparse.Namespace) -> int:
    from ..analysis.whole import analyse_image

    show = progress_wanted(quiet=args.json)
    done = 0
    for lines, total in analyse_image(img, args.prologue_rule, args.json, args.summary, args.jobs):
        _write_lines(lines)
        done += len(lines)
        if show:
            sys.stderr.write(f"\r{done}/{total} functions")
            sys.stderr.flush()
    if show:
        sys.stderr.write("\n")
    return 0


def _write_lines(lines) -> None:
    """Lines of str or bytes (full JSON: a gigabyte for a kernel, kept as bytes from the writer to the file),
    or a worker's ``Spilled`` file of them."""
    from ..analysis.whole import Spilled

    buf = getattr(sys.stdout, "buffer", None)
    if isinstance(lines, Spilled):
        sys.stdout.flush()
        if buf is not None:
            lines.copy_to(buf)
            return
        with open(lines.path, "rb") as f:
            text = f.read().decode()
        os.unlink(lines.path)
        sys.stdout.write(text)
        return
    if buf is None:
        sys.stdout.write("\n".join(x.decode() if isinstance(x, bytes) else x for x in lines) + "\n")
        return
    sys.stdout.flush()
    buf.write(b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines) + b"\n")


def _probes_source(img, args: argparse.Namespace) -> int:
    """``--line``, ``--inline``, ``--function F --lines``: probe sites named by the DWARF."""
    import json

    from ..analysis import inlines, lines, sourceview
    from ..analysis.indexcache import open_source

    if args.offset is not None or args.summary:
        raise UserError("--offset and --summary do not go with --line, --inline or --lines")
    if args.lines and not args.function:
        raise UserError("--lines lists one function's source: give --function F")
    source = open_source(img, args.debug, progress=progress_wanted(quiet=args.json))
    if args.inline:
        index = source.for_all(lines=False)
        copies = inlines.inline_copies(img, index, args.inline, args.prologue_rule)
        out = ([json.dumps(inlines.copy_dict(c), separators=(",", ":")) for c in copies] if args.json
               else [sourceview.inline_text(args.inline, copies)])
    elif args.line:
        index = source.for_line(*lines.parse_spec(args.line))
        sites = lines.line_sites(img, index, args.line, args.prologue_rule)
        out = ([json.dumps(lines.site_dict(s), separators=(",", ":")) for s in sites] if args.json
               else [sourceview.line_text(args.line, sites)])
    else:
        func = img.lookup(args.function)
        index = source.for_range(func.address, func.address + func.size)
        sites = lines.function_sites(img, index, func, args.prologue_rule)
        out = ([json.dumps(lines.site_dict(s), separators=(",", ":")) for s in sites] if args.json
               else [sourceview.listing_text(func, *lines.primary_file(index, func, sites), sites)])
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _probes_vars(img, args: argparse.Namespace) -> int:
    """``--line FILE:LINE --vars``, ``--function F --offset N --vars``: the variables at each site."""
    import json

    from ..analysis import lines, sourceview
    from ..analysis.indexcache import open_source
    from ..analysis.variables import variable_dict

    if args.inline or args.lines or args.all or args.summary:
        raise UserError("--vars goes with --line FILE:LINE, or with --function F --offset N")
    if not args.line and (not args.function or args.offset is None):
        raise UserError("--vars needs the sites: --line FILE:LINE, or --function F --offset N")
    source = open_source(img, args.debug, progress=progress_wanted(quiet=args.json))
    if args.line:
        index = source.for_line(*lines.parse_spec(args.line))
        sites = lines.line_sites(img, index, args.line, args.prologue_rule)
    else:
        func = img.lookup(args.function)
        index = source.for_range(func.address, func.address + func.size)
        sites = [lines.site_at(img, index, func, args.offset, args.prologue_rule)]
    reader = source.variables(index)
    out = []
    for site in sites:
        variables = reader.at(site.address)
        readings = [reader.read(v) for v in variables]
        if args.json:
            obj = lines.site_dict(site)
            obj["variables"] = [variable_dict(v, r) for v, r in zip(variables, readings)]
            out.append(json.dumps(obj, separators=(",", ":")))
        else:
            out.append(sourceview.vars_text(site, variables, readings))
    sys.stdout.write("\n".join(out) + "\n")
    return 0
