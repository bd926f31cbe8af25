"""Stage 5 and beyond on the command line: ``build``, ``fetch-release``, ``check-ko``, ``load``, ``unload``, ``ci-config``.

Each handler turns the arguments into a call of ``kmod.build``,
``kmod.release``, ``kmod.checkko``, ``run.hostops`` or
``kmod.ciconfig`` and returns the exit status; bad input raises
``UserError`` (one line, exit 2).

The defaults follow the host: on FreeBSD ``build`` and ``check-ko`` use
``/boot/kernel/kernel`` and ``build`` uses ``/usr/src/sys`` with ``make``;
elsewhere the kernel is the embedded sample (or the one ``--release``
fetched) and the sys/ tree must be named (``--sysdir``, ``$SYSDIR`` or
``--release``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from .. import isa as isa_registry
from ..common.errors import UserError
from ..common.host import on_freebsd
from ..kmod.backends import BACKEND_NAMES, BACKENDS, choose
from ..providers import PROVIDER_NAMES, PROVIDERS
from ..providers.contract import add_options, options_given, selection

HOST_KERNEL = "/boot/kernel/kernel"
HOST_SYSDIR = "/usr/src/sys"
MODULES_DEFAULT = ",".join(PROVIDER_NAMES)


def add_parsers(sub) -> None:
    """Register the stage-5 subcommands on the main parser."""
    b = sub.add_parser("build", help="generate, compile and link the provider modules into .ko files, then check them")
    b.add_argument("--kernel", help="target kernel (default: /boot/kernel/kernel on FreeBSD, else the sample kernel)")
    tree = b.add_mutually_exclusive_group()
    tree.add_argument("--sysdir", help="the target's FreeBSD sys/ tree (default: /usr/src/sys on FreeBSD, $SYSDIR)")
    tree.add_argument("--release", help="use the sys/ tree and kernel `fetch-release --release R` cached")
    b.add_argument("--cache", help="fetch-release cache directory (default: ~/.cache/kinstkit)")
    b.add_argument("--modules", default=MODULES_DEFAULT, help=f"comma-separated modules (default: {MODULES_DEFAULT})")
    b.add_argument("--target", choices=isa_registry.SUPPORTED, help="target architecture (default: the kernel's)")
    add_options(b, tuple(PROVIDERS.values()), "build")
    b.add_argument("--dep-module", action="append", default=[], help="check-ko: a dependency .ko (repeatable)")
    b.add_argument("--module-path", action="append", default=[], help="check-ko: a directory of dependency .ko "
                   "files (default: the kernel's directory)")
    b.add_argument("--out", help="build root (default: build/); the .ko files go to <out>/<kernel-build-id>/")
    b.add_argument("--src", help="where to generate the module sources (default: sys/modules/)")
    mode = b.add_mutually_exclusive_group()
    mode.add_argument("--backend", choices=BACKEND_NAMES, default="",
                      help="how modules are compiled and linked: " + "; ".join(
                          f"'{n}': {BACKENDS[n].summary}" for n in BACKEND_NAMES))
    for n in BACKEND_NAMES:
        mode.add_argument(f"--{n}", dest="backend", action="store_const", const=n, help=f"--backend {n}")
    b.set_defaults(run=cmd_build)

    f = sub.add_parser("fetch-release", help="download src.txz, kernel.txz, kernel-dbg.txz, verify them against "
                       "the release MANIFEST and unpack them into a cache")
    f.add_argument("--release", required=True, help="e.g. 14.3-RELEASE")
    f.add_argument("--mirror", help="mirror base URL (default: $KINSTKIT_FREEBSD_MIRROR or "
                   "https://download.freebsd.org)")
    f.add_argument("--cache", help="cache directory (default: $KINSTKIT_CACHE or ~/.cache/kinstkit)")
    f.add_argument("--dists", default="src.txz,kernel.txz,kernel-dbg.txz", help="comma-separated sets "
                   "(default: all three)")
    f.add_argument("--force", action="store_true", help="download again even when the cache is complete")
    f.add_argument("--target", choices=isa_registry.SUPPORTED, help="the architecture whose release to fetch "
                   "(default: this machine's)")
    f.set_defaults(run=cmd_fetch_release)

    c = sub.add_parser("check-ko", help="offline checks of .ko files against the target kernel")
    c.add_argument("files", nargs="+", metavar="FILE", help=".ko file(s) to check")
    c.add_argument("--kernel", help="target kernel (default: /boot/kernel/kernel on FreeBSD, else the sample kernel)")
    c.add_argument("--dep-module", action="append", default=[], help="a dependency .ko (dtrace.ko, "
                   "opensolaris.ko; repeatable)")
    c.add_argument("--module-path", action="append", default=None, help="a directory of dependency .ko files "
                   "(repeatable; default: the kernel's directory)")
    c.add_argument("--target", choices=isa_registry.SUPPORTED, help="target architecture (default: the kernel's)")
    c.add_argument("--json", action="store_true", help="one JSON array of reports")
    c.set_defaults(run=cmd_check_ko)

    for name, helptext, handler in (
        ("load", "kldload the built modules (locally on FreeBSD, or over ssh) after a kernel build-id check",
         cmd_load),
        ("unload", "kldunload the modules (locally on FreeBSD, or over ssh)", cmd_unload),
    ):
        lp = sub.add_parser(name, help=helptext)
        where = lp.add_mutually_exclusive_group()
        where.add_argument("--host", help="ssh destination (user@host)")
        where.add_argument("--vm", help="a VM reachable as ssh host NAME")
        lp.add_argument("--modules", default=MODULES_DEFAULT, help="comma-separated modules (default: both)")
        if name == "load":
            lp.add_argument("--build", help="the build/<kernel-build-id>/ directory to load from "
                            "(default: the one for the running kernel)")
            lp.add_argument("--out", help="build root (default: build/)")
        lp.set_defaults(run=handler)

    ci = sub.add_parser("ci-config", help="write a GitHub Actions workflow and a Cirrus CI file that build the "
                        "modules for a list of FreeBSD releases")
    ci.add_argument("--release", action="append", default=[], help="a FreeBSD release (repeatable; default: "
                    "14.2-RELEASE and 14.3-RELEASE)")
    ci.add_argument("--modules", default=MODULES_DEFAULT, help="comma-separated modules (default: both)")
    ci.add_argument("--out", help="output directory (default: .ci/generated/)")
    ci.set_defaults(run=cmd_ci_config)


def _default_kernel(explicit: Optional[str]) -> str:
    if explicit:
        return explicit
    if on_freebsd() and os.path.isfile(HOST_KERNEL):
        return HOST_KERNEL
    from ..image import resolve_kernel

    return resolve_kernel(None)


def _tree_and_kernel(args: argparse.Namespace) -> Tuple[Optional[str], str]:
    """The sys/ tree and kernel a build uses, from the flags, the release cache or the host."""
    if args.release:
        from ..kmod.release import fetched

        rel = fetched(args.release, args.cache, args.target)
        return str(rel.sysdir), args.kernel or str(rel.kernel)
    if args.sysdir:
        return args.sysdir, _default_kernel(args.kernel)
    if on_freebsd() and os.path.isdir(os.path.join(HOST_SYSDIR, "kern")):
        return HOST_SYSDIR, _default_kernel(args.kernel)
    return os.environ.get("SYSDIR") or None, _default_kernel(args.kernel)


def cmd_build(args: argparse.Namespace) -> int:
    from ..kmod import build
    from ..providers import parse_modules

    modules = parse_modules(args.modules)
    sysdir, kernel = _tree_and_kernel(args)
    choose(args.backend)  # one line now if it cannot run here, before anything is generated
    sel = selection(args)
    chosen = tuple(PROVIDERS[m] for m in modules)
    for name in PROVIDER_NAMES:
        unused = [] if name in modules else options_given(PROVIDERS[name], sel, "build", chosen)
        if unused:
            raise UserError(f"{unused[0]}, and --modules does not include {name}")
    req = build.BuildRequest(
        kernel=kernel,
        sysdir=sysdir,
        modules=modules,
        target=args.target,
        out_root=Path(args.out) if args.out else build.DEFAULT_OUT,
        src_root=Path(args.src) if args.src else build.DEFAULT_SRC,
        selection=sel,
        dep_modules=tuple(args.dep_module),
        module_path=tuple(args.module_path),
        backend=args.backend,
    )
    return build.build(req, sys.stdout)


def cmd_fetch_release(args: argparse.Namespace) -> int:
    from ..kmod.release import fetch_release

    dists = tuple(d.strip() for d in args.dists.split(",") if d.strip())
    fetch_release(args.release, args.mirror, args.cache, dists, args.force, sys.stdout, args.target)
    return 0


def cmd_check_ko(args: argparse.Namespace) -> int:
    from ..kmod.checkko import print_reports, run_check

    reports = run_check(args.files, _default_kernel(args.kernel), args.dep_module, args.module_path, args.target)
    return print_reports(reports, args.json, sys.stdout, sys.stderr)


def _target(args: argparse.Namespace):
    from ..run.hostops import Target

    return Target.choose(args.host, args.vm)


def cmd_load(args: argparse.Namespace) -> int:
    from ..kmod import build
    from ..run import hostops
    from ..providers import parse_modules

    modules = parse_modules(args.modules)
    root = Path(args.out) if args.out else build.DEFAULT_OUT
    return hostops.load(modules, _target(args), root, args.build, out=sys.stdout)


def cmd_unload(args: argparse.Namespace) -> int:
    from ..run import hostops
    from ..providers import parse_modules

    return hostops.unload(parse_modules(args.modules), _target(args), out=sys.stdout)


def cmd_ci_config(args: argparse.Namespace) -> int:
    from ..kmod.ciconfig import DEFAULT_OUT, DEFAULT_RELEASES, render_ci

    paths: List[Path] = render_ci(args.release or list(DEFAULT_RELEASES), Path(args.out) if args.out else DEFAULT_OUT,
                                  args.modules)
    for p in paths:
        sys.stdout.write(f"{p}\n")
    return 0
