"""``vm-test --guest linux``: the ring-0 run (``generator/run/ring0``) over the VM runner (``vm/``).

``generator.run`` may not import ``vm/``; this module, on top of both, is
the ``Booter`` the session boots through: a ``Boot`` becomes a ``VMConfig``
for the ``linux`` guest, and the ``VMResult`` a ``Booted``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Tuple

from ..common.errors import UserError
from ..run.ring0 import session as S

# The function set the default run probes (names, one per line): see the file's own comment.
DEFAULT_FUNCTIONS = Path(__file__).resolve().parents[2] / "vm" / "guest" / "linux" / "functions.txt"
DEFAULT_TIMEOUT = 900.0  # the probe boot's whole-run limit, seconds, when --timeout is not given


class VmBooter:
    """The session's ``Booter``: each boot is one ``vm.run`` of the ``linux`` guest."""

    def __init__(self, accel: str = "auto"):
        self.accel = accel

    def identity(self, cpus: int) -> Tuple[str, ...]:
        from vm.backends import accel as accel_mod
        from vm.backends.probe import kvm_probe
        from vm.backends.qemu import qemu_version
        from vm.config import VMConfig
        from vm.images.linux import APPEND

        choice = accel_mod.choose(self.accel, kvm_probe(VMConfig(guest="linux")))
        # TCG's default CPU is qemu64; under KVM it is the host's, whose features decide the alternatives.
        return (qemu_version() or "", choice.name, "machine=pc", f"cpus={cpus}", APPEND)

    def boot(self, b: S.Boot) -> S.Booted:
        from vm import VMConfig, run

        cfg = VMConfig(guest="linux", image_package=str(b.image_root), modules=str(b.module_dir),
                       extra=tuple((str(p), n) for p, n in b.extra), cpus=b.cpus, memory_mib=b.memory_mib,
                       timeout=b.timeout, qemu_args=b.qemu_args, keep=b.keep, runs_dir=b.runs_dir, accel=self.accel)
        res = run(cfg)
        failed = tuple(f"{c.name}: {c.detail}" for c in res.checks if c.status not in ("pass", "skip"))
        return S.Booted(res.status, res.end, Path(res.run_dir), Path(res.run_dir) / "out", Path(res.console_log),
                        dict(res.timings), failed, res.text())


def functions_of(args: argparse.Namespace) -> Tuple[str, ...]:
    names: Tuple[str, ...] = tuple(args.function or ())
    if args.functions_from:
        names += S.default_functions(Path(args.functions_from))
    return names or S.default_functions(DEFAULT_FUNCTIONS)


def request_of(args: argparse.Namespace) -> S.Request:
    if args.smp is not None and args.cpus is not None and args.smp != args.cpus:
        raise UserError(f"--smp {args.smp} and --cpus {args.cpus} disagree; give one")
    cpus = next(v for v in (args.smp, args.cpus, 2) if v is not None)
    if cpus < 1:
        raise UserError(f"--smp {cpus}: at least 1")
    workload = Path(args.workload) if args.workload else S.WORKLOAD
    if not workload.is_file():
        raise UserError(f"--workload {workload}: no such file")
    if args.cycles < 0:
        raise UserError(f"--cycles {args.cycles}: cannot be negative")
    if args.timeout is not None and args.timeout <= 0:
        raise UserError(f"--timeout {args.timeout}: must be positive")
    return S.Request(functions=functions_of(args), workload=workload, cpus=cpus, memory_mib=args.memory or 512,
                     cycles=args.cycles, rule=args.prologue_rule,
                     timeout=args.timeout if args.timeout is not None else DEFAULT_TIMEOUT, keep=args.keep,
                     runs_dir=args.runs_dir, jump=args.jump)


def cmd_linux(args: argparse.Namespace) -> int:
    """The ``vm-test --guest linux`` command: run, print the report (text, or JSON lines), 0 on PASS."""
    req = request_of(args)
    show = sys.stderr.isatty() and not args.json

    def progress(what: str) -> None:
        if show:
            sys.stderr.write(f"vm-test linux: {what}\n")
            sys.stderr.flush()

    rep = S.run(req, VmBooter(args.accel), progress)
    if args.json:
        out = sys.stdout
        for p in rep.probes:
            out.write(json.dumps(p.to_json()) + "\n")
        out.write(json.dumps(rep.summary()) + "\n")
    else:
        sys.stdout.write(rep.text())
    return 0 if rep.ok else 1
