"""Commands ``vm-test``, ``vm-shell`` and ``vm-image``: the VM runner (vm/) on the command line.

``vm-test`` boots a guest, runs the checks (or ``--script``), prints pass,
fail or error per check with the console log's path and the timings (or one
JSON object with ``--json``), and exits 0 only when everything passed: 1 on
any failure, 2 on a bad request, 130 when interrupted.  ``vm-shell`` boots the
same VM with its serial console on this terminal.  ``vm-image`` downloads,
verifies and caches an official FreeBSD VM image.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Tuple

from . import args as A
from ..common.defaults import PROLOGUE_NONE
from ..common.errors import UserError


def add_parsers(subparsers) -> None:
    t = _vm_parser(
        subparsers, "vm-test",
        "boot a VM, load the built modules, run the dtrace checks, collect results, always tear down",
        "Boot a guest (the stand-in Linux guest, or FreeBSD from --image/--release), hand it the "
        "modules and a guest script on a meta disk, collect the results, and tear everything down.",
        "run this guest script instead of the default checks (as /meta/run.sh)",
    )
    t.add_argument("--expect", help="expected-output specs for --script (format: vm/guest/lib/checks.sh)")
    t.add_argument("--timeout", type=float, help="whole-run limit in seconds (default: the guest's, longer under TCG)")
    t.add_argument("--boot-timeout", type=float, help="seconds until the guest hook must have started")
    t.add_argument("--kill-after", type=float, default=5.0, help="SIGKILL this long after SIGTERM at a limit (default: 5)")
    t.add_argument("--json", action="store_true", help="print the result as one JSON object")
    g = t.add_argument_group("the linux guest (--guest linux): kinstkit's kinst core and a generated table in "
                             "ring 0 of Debian's Linux 6.1, checked against a QEMU plugin")
    g.add_argument("--function", action="append", metavar="F",
                   help="probe every instruction of function F (repeatable; name, or name@file for one local "
                   "copy; default: the functions in vm/guest/linux/functions.txt)")
    g.add_argument("--functions-from", metavar="FILE", help="probe the functions named in FILE, one per line")
    g.add_argument("--smp", type=int, help="virtual CPUs of the linux guest (default: 2)")
    g.add_argument("--workload", metavar="FILE", help="guest shell script to run while the probes are armed "
                   "(default: vm/guest/linux/workload.sh)")
    g.add_argument("--cycles", type=int, default=3,
                   help="disarm and re-arm every probe this many times while the workload runs (default: 3)")
    g.add_argument("--jump", action="store_true",
                   help="a jump instead of the breakpoint wherever the proof allows it (probes --jump), "
                   "placed and removed by the live patching protocol; breakpoints elsewhere")
    A.add_prologue_rule(g, default=PROLOGUE_NONE, extra=(PROLOGUE_NONE,))
    t.set_defaults(run=cmd_vm_test)

    s = _vm_parser(
        subparsers, "vm-shell",
        "boot the same VM with its serial console on this terminal (Ctrl-A X quits)",
        "Boot the vm-test VM interactively.  The meta disk is unpacked in /meta; "
        "'sh /meta/run.sh' runs the checks.  The VM is torn down when QEMU exits.",
        "guest script to put on the meta disk as /meta/run.sh",
    )
    s.add_argument("--timeout", type=float, help="end the session after this many seconds (default: none)")
    s.set_defaults(run=cmd_vm_shell)

    i = subparsers.add_parser("vm-image", help="download, verify and cache an official FreeBSD VM image")
    i.add_argument("--release", required=True, help="e.g. 14.3-RELEASE")
    i.add_argument("--flavor", default="BASIC-CLOUDINIT", help="BASIC-CLOUDINIT (default) or BASIC-CI")
    i.add_argument("--mirror", help="mirror base URL (default: https://download.freebsd.org, or $KINSTKIT_FREEBSD_MIRROR)")
    i.set_defaults(run=cmd_vm_image)


def _vm_parser(subparsers, name: str, summary: str, description: str, script: str) -> argparse.ArgumentParser:
    """vm-test and vm-shell boot the same guest: one set of guest options and a --script for both."""
    p = subparsers.add_parser(name, help=summary, description=description)
    _guest_options(p)
    p.add_argument("--script", help=script)
    return p


def _guest_options(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("--guest", choices=("standin", "freebsd", "linux"),
                       help="standin (default), freebsd (with --image/--release) or linux (vm-test only: the "
                       "kinst core in ring 0 of a Linux kernel)")
    which.add_argument("--image", help="a FreeBSD VM image (raw or qcow2), used read-only through a per-run overlay")
    which.add_argument("--release", help="a FreeBSD release whose official image vm-image fetches, e.g. 14.3-RELEASE")
    p.add_argument("--flavor", default="BASIC-CLOUDINIT", help="image flavor for --release (default: BASIC-CLOUDINIT)")
    p.add_argument("--modules", help="directory of .ko files (default: build/<kernel-build-id>/; none for the stand-in)")
    p.add_argument("--backend", choices=("auto", "qemu", "bhyve"), default="auto", help="default: bhyve on FreeBSD, else qemu")
    p.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                   help="QEMU accelerator (default: kvm only when it really works here, else tcg)")
    p.add_argument("--memory", type=int, help="guest RAM in MiB (default: the guest's)")
    p.add_argument("--cpus", type=int, help="virtual CPUs (default: the guest's)")
    p.add_argument("--console", choices=("stdio", "nmdm"), default="stdio", help="bhyve: com1 on stdio or an nmdm pair")
    p.add_argument("--loader", choices=("bhyveload", "uefi"), default="bhyveload", help="bhyve: bhyveload or UEFI")
    p.add_argument("--mirror", help="FreeBSD mirror for --release")
    p.add_argument("--runs-dir", help="where run directories go (default: build/vm/)")
    p.add_argument("--keep", action="store_true", help="keep the overlay and meta disk in the run directory")
    p.add_argument("--dry-run", action="store_true", help="print the commands that would run; start nothing")


def _config(args: argparse.Namespace, interactive: bool):
    from vm import VMConfig

    guest = args.guest or ("freebsd" if (args.image or args.release) else "standin")
    return VMConfig(
        guest=guest, image=args.image, release=args.release, flavor=args.flavor, backend=args.backend,
        accel=args.accel, script=args.script, expect=getattr(args, "expect", None), modules=args.modules,
        memory_mib=args.memory, cpus=args.cpus, boot_timeout=getattr(args, "boot_timeout", None),
        timeout=args.timeout, kill_after=getattr(args, "kill_after", 5.0), keep=args.keep,
        interactive=interactive, runs_dir=args.runs_dir, console=args.console, loader=args.loader,
        mirror=args.mirror, dry_run=args.dry_run,
    )


def _print_dry_run(res) -> None:
    import shlex

    sys.stdout.write(f"# {res.guest} under {res.backend} ({res.accel['name']}: {res.accel['reason']})\n")
    sys.stdout.write(f"# limits: boot {res.timings['boot_limit']} s, whole run {res.timings['run_limit']} s\n")
    for n in res.notes:
        sys.stdout.write(f"# note: {n}\n")
    for cmd in res.commands:
        sys.stdout.write(" ".join(shlex.quote(w) for w in cmd) + "\n")


def cmd_vm_test(args: argparse.Namespace) -> int:
    if args.guest == "linux":
        if args.script or args.expect or args.dry_run or args.modules:
            raise UserError("--script, --expect, --modules and --dry-run do not go with --guest linux: it builds "
                            "its module and runs its own guest script")
        from .linuxguest import cmd_linux

        return cmd_linux(args)
    if args.function or args.functions_from or args.workload or args.smp is not None or args.jump:
        raise UserError("--function, --functions-from, --workload, --smp and --jump go with --guest linux")
    from vm import run

    res = run(_config(args, interactive=False))
    if args.dry_run:
        if args.json:
            sys.stdout.write(json.dumps(res.to_json(), indent=1) + "\n")
        else:
            _print_dry_run(res)
        return 0
    if args.json:
        sys.stdout.write(json.dumps(res.to_json(), indent=1) + "\n")
    else:
        sys.stdout.write(res.text())
    sys.stdout.flush()
    return res.exit_status


def cmd_vm_shell(args: argparse.Namespace) -> int:
    if args.guest == "linux":
        raise UserError("vm-shell does not boot the linux guest; vm-test --guest linux --keep keeps its disks")
    from vm import run

    res = run(_config(args, interactive=True))
    if args.dry_run:
        _print_dry_run(res)
        return 0
    sys.stdout.write("\n" + res.text())
    return res.exit_status


def cmd_vm_image(args: argparse.Namespace) -> int:
    from vm.images.freebsd import fetch_image, image_url

    url, _ = image_url(args.release, args.flavor, args.mirror)
    state: List[Tuple[int, int]] = []
    show = sys.stderr.isatty()

    def progress(got: int, total) -> None:
        if show and (not state or got - state[-1][0] >= 8 << 20 or got == total):
            state.append((got, total or 0))
            of = f" of {total >> 20} MiB" if total else ""
            sys.stderr.write(f"\r{url.rsplit('/', 1)[-1]}: {got >> 20} MiB{of}")
            sys.stderr.flush()

    path = fetch_image(args.release, args.flavor, mirror=args.mirror, progress=progress)
    if state:
        sys.stderr.write("\n")
    sys.stdout.write(f"{path}\n")
    return 0

