"""Command line: ``python -m generator <command> ...``.

One command with sane defaults: with no ``--kernel`` every command works on the
embedded sample kernel (built from ``samples/kernel/`` on first use), so a
newcomer sees real output at once.  Errors are one line on stderr and a
nonzero exit; there is no traceback for bad input.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from typing import List, Optional, Sequence, Tuple

from .errors import ClassifierError, UserError

DEFAULT_FUNCTION = "vm_fault"

# generate --provider NAME -> "module:function" taking the parsed args.
GENERATORS = {
    "kinst": "generator.kinst_gen:generate",
    "dtmalloc": "generator.dtmalloc_cli:generate",
}
# Modules that add their own subcommands with add_commands(subparsers).
COMMAND_MODULES = ("generator.dtmalloc_cli", "generator.harness", "generator.vmtest_cli", "generator.build_cli")
EXIT_USER = 2
EXIT_BUG = 3


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m generator", description="Ahead-of-time kinst/dtmalloc tooling.")
    sub = p.add_subparsers(dest="command", required=True)

    pr = sub.add_parser("probes", help="list kinst probe sites of a function, with kinst's metadata")
    pr.add_argument("--kernel", help="ELF image: kernel, .ko or shared object (default: the embedded sample kernel)")
    which = pr.add_mutually_exclusive_group()
    which.add_argument("--function", help=f"function name, name@file or 0xADDRESS (default: {DEFAULT_FUNCTION})")
    which.add_argument("--all", action="store_true", help="every function of the image")
    pr.add_argument("--offset", type=_offset, help="only the instruction at this byte offset")
    pr.add_argument("--json", action="store_true", help="JSON: one object per function (one per line with --all)")
    pr.add_argument(
        "--summary",
        action="store_true",
        help="per function: verdict and probe counts by kind, not every instruction (fast path for whole images)",
    )
    pr.add_argument(
        "--prologue-rule",
        choices=("any", "first"),
        default="any",
        help="frame-pointer rule: 'any' push %%rbp (newest kinst, default) or 'first' byte 0x55 (FreeBSD 14.0)",
    )
    pr.add_argument("--jobs", type=int, default=0, help="worker processes for --all (default: one per core)")
    pr.set_defaults(run=cmd_probes)

    ge = sub.add_parser("generate", help="render a provider module's C sources from templates/")
    ge.add_argument("--provider", choices=sorted(GENERATORS), default="kinst", help="which provider (default: kinst)")
    ge.add_argument("--kernel", help="kernel image (default: the embedded sample kernel)")
    ge.add_argument("--module", action="append", default=[], help="a .ko whose contents to include (repeatable)")
    gwhich = ge.add_mutually_exclusive_group()
    gwhich.add_argument("--function", action="append", default=[], help="kinst: a function to table (repeatable)")
    gwhich.add_argument("--all", action="store_true", help="kinst: every eligible function")
    ge.add_argument("--out", help="output directory (default: sys/modules/<provider>/)")
    ge.set_defaults(run=cmd_generate)

    for mod in COMMAND_MODULES:
        _optional_module(mod, "add_commands", lambda f: f(sub))

    from .oracle import add_verify_parser

    add_verify_parser(sub)

    sa = sub.add_parser("sample", help="build the embedded sample kernel and print its path")
    sa.add_argument("--rebuild", action="store_true", help="rebuild even when the cached image is current")
    sa.set_defaults(run=cmd_sample)

    be = sub.add_parser("bench", help="time whole-image analysis against objdump -d on the same image")
    be.add_argument("--image", help="image with >= 20 MiB of text (default: the largest libLLVM here)")
    be.add_argument("--out", default="bench/results", help="results directory (default: bench/results)")
    be.add_argument("--skip-harness", action="store_true", help="skip the harness benchmark")
    be.add_argument("--skip-vm", action="store_true", help="skip the stand-in VM cycle benchmark")
    be.set_defaults(run=cmd_bench)
    return p


def _offset(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"offset '{text}' is not a number")


def resolve_kernel(path: Optional[str]) -> str:
    """The image to read: ``path``, or the embedded sample kernel."""
    if path:
        return path
    from .sample import sample_kernel

    return str(sample_kernel())


def cmd_probes(args: argparse.Namespace) -> int:
    from . import report
    from .image import KernelImage
    from .probes import analyse, find_offset

    img = KernelImage.open(resolve_kernel(args.kernel))
    if args.all:
        if args.offset is not None:
            raise UserError("--offset needs --function, not --all")
        return _probes_all(img, args)
    func = img.lookup(args.function or DEFAULT_FUNCTION)
    rep = analyse(img, func, args.prologue_rule)
    if args.summary:
        from .summary import from_report

        rec = from_report(rep)
        sys.stdout.write((report.summary_json(rec) if args.json else report.summary_text(rec)) + "\n")
        return 0
    if args.offset is not None:
        find_offset(rep, args.offset)
    out = report.function_json(rep, args.offset) if args.json else report.function_text(rep, args.offset)
    sys.stdout.write(out + "\n")
    return 0


def _optional_module(name: str, attr: str, use) -> None:
    """Call ``use(module.attr)`` if that module exists yet."""
    import importlib

    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        return
    use(getattr(mod, attr))


def cmd_generate(args: argparse.Namespace) -> int:
    import importlib

    modname, _, func = GENERATORS[args.provider].partition(":")
    try:
        mod = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name != modname:
            raise
        raise UserError(f"the {args.provider} generator is not implemented yet")
    return getattr(mod, func)(args)


def cmd_sample(args: argparse.Namespace) -> int:
    from .sample import sample_kernel

    sys.stdout.write(f"{sample_kernel(rebuild=args.rebuild)}\n")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .bench import run_bench

    from .harness import bench_harness

    res = run_bench(args.image, Path(args.out))
    sys.stdout.write((Path(args.out) / "analysis.md").read_text() + "\n")
    if not args.skip_harness:
        bench_harness(Path(args.out))
        sys.stdout.write((Path(args.out) / "harness.md").read_text() + "\n")
    if not args.skip_vm:
        from vm.bench import bench_vm

        bench_vm(Path(args.out))
        sys.stdout.write((Path(args.out) / "vm.md").read_text())
    return 0 if res["runs"]["ours"]["instructions"] else 1


# --all: functions are analysed in forked workers that inherit the open image.
_WORKER_IMG = None
_WORKER_ARGS: Tuple[str, bool, bool] = ("any", False, False)


def _work(chunk: Tuple[int, int]) -> Tuple[List[str], int]:
    from . import report, summary
    from .isa import isa_for
    from .probes import analyse

    rule, as_json, as_summary = _WORKER_ARGS
    img = _WORKER_IMG
    isa = isa_for(img.arch)
    accel = summary.accelerator(isa)
    funcs = img.functions()[chunk[0] : chunk[1]]
    out, n = [], 0
    for f in funcs:
        if as_summary:
            rec = summary.fast(img, f, rule, isa, accel)
            n += rec["instructions"]
            out.append(report.summary_json(rec) if as_json else report.summary_text(rec))
            continue
        rep = analyse(img, f, rule, isa)
        n += len(rep.probes)
        out.append(report.function_json(rep) if as_json else report.function_text(rep))
    return out, n


def _chunks(total: int, size: int) -> List[Tuple[int, int]]:
    return [(i, min(i + size, total)) for i in range(0, total, size)]


def _probes_all(img, args: argparse.Namespace) -> int:
    global _WORKER_IMG, _WORKER_ARGS
    funcs = img.functions()
    if not funcs:
        raise UserError(f"{img.path}: no function symbols (stripped image?); use an unstripped kernel or its debug file")
    _WORKER_IMG, _WORKER_ARGS = img, (args.prologue_rule, args.json, args.summary)
    jobs = args.jobs or os.cpu_count() or 1
    chunks = _chunks(len(funcs), 64)
    show = progress_wanted(args.json)
    done = 0
    if jobs > 1 and len(chunks) > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(jobs) as pool:
            for lines, _ in pool.imap(_work, chunks):
                done = _emit(lines, done, len(funcs), show)
    else:
        for c in chunks:
            done = _emit(_work(c)[0], done, len(funcs), show)
    if show:
        sys.stderr.write("\n")
    return 0


def _emit(lines: List[str], done: int, total: int, show: bool) -> int:
    sys.stdout.write("\n".join(lines) + "\n")
    done += len(lines)
    if show:
        sys.stderr.write(f"\r{done}/{total} functions")
        sys.stderr.flush()
    return done


def progress_wanted(json_mode: bool) -> bool:
    """Progress goes to a terminal only: never in JSON mode or under CI."""
    return not json_mode and not os.environ.get("CI") and sys.stderr.isatty()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.run(args)
    except UserError as e:
        sys.stderr.write(f"error: {e}\n")
        return EXIT_USER
    except ClassifierError as e:
        sys.stderr.write(f"internal error (please report): {e}\n")
        return EXIT_BUG
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
