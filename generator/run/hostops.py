"""``invoke load`` / ``invoke unload``: the built modules in and out of a running FreeBSD kernel.

Locally on a FreeBSD host, or on another one over ssh (``--host H``, or
``--vm NAME`` for a VM reachable as ssh host ``NAME``).  Loading first asks
the running kernel for its build-id (``sysctl -n kern.build_id``) and refuses
when it is not the one the modules' tables were generated from: a kinst
table for another kernel would patch the wrong bytes.  kldload's and
kldunload's failures are turned into one line that says what to do -- not
root, a module of the same name already loaded (the stock ``kinst.ko`` or
``dtmalloc.ko``: unload it first), a module that is busy.

Every command goes through a ``run`` callable, so the command lines and the
error mapping are tested on any machine with a stand-in that answers like
FreeBSD's tools; the real path runs ``subprocess`` on FreeBSD (or ssh/scp).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from ..common.errors import UserError
from ..common.tools import Completed

Run = Callable[[Sequence[str]], Completed]
REMOTE_DIR = "/tmp/kinstkit"
# Stock modules that depend on the providers (sys/modules/dtrace/dtraceall).
DEPENDENTS = ("dtraceall",)


def run_command(argv: Sequence[str]) -> Completed:
    """The real runner: a subprocess with its output captured."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=120)
    except FileNotFoundError:
        raise UserError(f"{argv[0]}: not found on this host") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"{' '.join(argv[:3])}: no answer within 120 s") from None
    return Completed(proc.returncode, proc.stdout, proc.stderr)


@dataclass(frozen=True)
class Target:
    """Where the kernel runs: this host, or an ssh destination."""

    host: Optional[str] = None  # None: this host
    label: str = "this host"

    @classmethod
    def choose(cls, host: Optional[str], vm: Optional[str], sysname: Optional[str] = None) -> "Target":
        if host and vm:
            raise UserError("--host and --vm name the same thing twice; give one")
        if host:
            return cls(host, host)
        if vm:
            return cls(vm, f"VM {vm}")
        sysname = sysname or os.uname().sysname
        if sysname != "FreeBSD":
            raise UserError(
                f"kldload runs on FreeBSD and this host is {sysname}: use --host H (ssh) or --vm NAME"
            )
        return cls()

    def argv(self, words: Sequence[str]) -> List[str]:
        """The command as it runs here: as is, or through ssh as one quoted command line."""
        if self.host is None:
            return list(words)
        return ["ssh", "-o", "BatchMode=yes", self.host, " ".join(shlex.quote(w) for w in words)]

    def copy(self, local: Path, remote: str) -> List[str]:
        return ["scp", "-q", "-o", "BatchMode=yes", str(local), f"{self.host}:{remote}"]


@dataclass(frozen=True)
class Built:
    """One built module, as its manifest describes it."""

    name: str
    ko: Path
    table_build_id: Optional[str]
    sha256: str


def find_build(build_root: Path, modules: Sequence[str], build_dir: Optional[str],
               running: Optional[str]) -> Tuple[Path, List[Built]]:
    """The build directory to load from and its modules.

    ``--build`` names it; otherwise ``build/<running build-id>/`` when it
    exists, else the newest directory holding all requested manifests (which
    the build-id check will then refuse if it is for another kernel).
    """
    if build_dir:
        bdir = Path(build_dir)
    elif running and (build_root / running).is_dir():
        bdir = build_root / running
    else:
        cands = [d for d in build_root.iterdir() if d.is_dir() and all((d / f"{m}.json").is_file() for m in modules)] \
            if build_root.is_dir() else []
        if not cands:
            raise UserError(f"no build of {', '.join(modules)} under {build_root}: run `invoke build` first")
        bdir = max(cands, key=lambda d: max((d / f"{m}.json").stat().st_mtime for m in modules))
    out = []
    for m in modules:
        mpath = bdir / f"{m}.json"
        try:
            manifest = json.loads(mpath.read_text())
        except (OSError, ValueError):
            raise UserError(f"{mpath}: no manifest for {m}; run `invoke build --modules {m}` first") from None
        ko = Path(manifest["ko"]["path"])
        if not ko.is_file():
            ko = bdir / f"{m}.ko"
        if not ko.is_file():
            raise UserError(f"{bdir / (m + '.ko')}: missing although {mpath} lists it; rebuild")
        if not manifest.get("check_ko", {}).get("ok"):
            raise UserError(f"{ko}: check-ko failed when it was built ({mpath}); fix the build before loading it")
        out.append(Built(m, ko, manifest.get("table_build_id"), manifest["ko"]["sha256"]))
    return bdir, out


def _require_root(target: Target, run: Run) -> None:
    res = run(target.argv(["id", "-u"]))
    if res.returncode != 0:
        raise UserError(f"{target.label}: cannot run commands there: {_first_line(res)}")
    if res.stdout.strip() != "0":
        where = "" if target.host is None else f" on {target.label}"
        raise UserError(f"kldload and kldunload need root{where}: run as root"
                        + (" (sudo)" if target.host is None else f" or use --host root@{target.host.split('@')[-1]}"))


def running_build_id(target: Target, run: Run) -> str:
    res = run(target.argv(["sysctl", "-n", "kern.build_id"]))
    value = res.stdout.strip()
    if res.returncode != 0 or not value:
        raise UserError(f"{target.label}: `sysctl -n kern.build_id` failed ({_first_line(res)}); "
                        "the running kernel's build-id cannot be compared with the tables'")
    return value.lower()


def _first_line(res: Completed) -> str:
    text = (res.stderr or res.stdout).strip()
    return text.splitlines()[0] if text else f"exit {res.returncode}"


# kldload(8) and kldunload(8) print strerror(3) of the failed call.  Each row: the
# message fragments (lowercase, any of them) -> the line that says what to do.
# {name} is the module, {msg} the tool's message, {where} the host.
_KLDLOAD_ERRORS: Tuple[Tuple[Tuple[str, ...], str], ...] = (
    (("operation not permitted",), "kldload {name}: not permitted: loading modules needs root ({msg})"),
    (("already loaded", "file exists"),
     "kldload {name}: a module named {name} is already loaded -- the stock {name}.ko or an earlier "
     "build: run `kldunload {name}` first (and `kldunload dtraceall` if it is loaded)"),
    (("exec format error",),
     "kldload {name}: the kernel refused the file ({msg}); see `dmesg | tail` on {where}: "
     "usually a symbol the kernel lacks or a build against another release (run invoke check-ko)"),
    (("no such file",),
     "kldload {name}: a file was not found ({msg}): the module itself, or a dependency "
     "(dtrace.ko, opensolaris.ko) missing from /boot/kernel"),
)
_KLDUNLOAD_ERRORS: Tuple[Tuple[Tuple[str, ...], str], ...] = (
    (("operation not permitted",), "kldunload {name}: not permitted: unloading modules needs root ({msg})"),
    (("device busy", "resource busy"),
     "kldunload {name}: module busy: a dtrace(1) session still has its probes enabled, or another "
     "module depends on it (dtraceall): stop dtrace, `kldunload dtraceall`, and retry"),
    (("can't find file", "no such file"), "kldunload {name}: {name}.ko is not loaded"),
)


def _explain(table: Tuple[Tuple[Tuple[str, ...], str], ...], fallback: str, msg: str, **fields: str) -> str:
    """The first row of ``table`` whose fragments occur in ``msg``, filled in; else ``fallback``."""
    low = msg.lower()
    for fragments, line in table:
        if any(f in low for f in fragments):
            return line.format(msg=msg, **fields)
    return fallback.format(msg=msg, **fields)


def kldload_error(name: str, res: Completed, target: Target) -> str:
    """One line for a failed kldload, from its message (kldload(8) prints strerror)."""
    return _explain(_KLDLOAD_ERRORS, "kldload {name}: failed: {msg}", _first_line(res), name=name, where=target.label)


def kldunload_error(name: str, res: Completed) -> str:
    """One line for a failed kldunload, from its message."""
    return _explain(_KLDUNLOAD_ERRORS, "kldunload {name}: failed: {msg}", _first_line(res), name=name)


def is_loaded(target: Target, module: str, run: Run) -> bool:
    """``kldstat -q -m NAME``: whether a module of that name is registered (stock or ours)."""
    return run(target.argv(["kldstat", "-q", "-m", module])).returncode == 0


def load(modules: Sequence[str], target: Target, build_root: Path, build_dir: Optional[str] = None,
         run: Run = run_command, out=sys.stdout) -> int:
    """Load ``modules`` in order; refuse before touching the kernel if anything is wrong."""
    _require_root(target, run)
    running = running_build_id(target, run)
    bdir, built = find_build(build_root, modules, build_dir, running)
    for b in built:
        if b.table_build_id and b.table_build_id.lower() != running:
            raise UserError(
                f"{b.ko}: its tables were made for kernel build-id {b.table_build_id}, but {target.label} runs "
                f"{running}: refusing to load; rebuild with --kernel set to that machine's /boot/kernel/kernel"
            )
        if not b.table_build_id:
            raise UserError(f"{b.ko}: its manifest names no table build-id; refusing to load it unchecked")
    for b in built:
        if is_loaded(target, b.name, run):
            raise UserError(
                f"module {b.name} is already loaded on {target.label} (the stock {b.name}.ko, or an earlier "
                f"build): run `kldunload {b.name}` first (and `kldunload dtraceall` if it is loaded)"
            )
    for b in built:
        path = str(b.ko.resolve())
        if target.host is not None:
            remote = f"{REMOTE_DIR}/{bdir.name}"
            res = run(target.argv(["mkdir", "-p", remote]))
            if res.returncode != 0:
                raise UserError(f"{target.label}: cannot create {remote}: {_first_line(res)}")
            path = f"{remote}/{b.name}.ko"
            res = run(target.copy(b.ko, path))
            if res.returncode != 0:
                raise UserError(f"scp {b.ko} to {target.label}: {_first_line(res)}")
        res = run(target.argv(["kldload", "-v", path]))
        if res.returncode != 0:
            raise UserError(kldload_error(b.name, res, target))
        out.write(f"{b.name}: loaded on {target.label}: {res.stdout.strip() or path} "
                  f"(kernel build-id {running} matches the tables)\n")
    return 0


def unload(modules: Sequence[str], target: Target, run: Run = run_command, out=sys.stdout) -> int:
    """Unload ``modules`` in reverse order; each failure is one line, the exit status 1."""
    _require_root(target, run)
    status = 0
    for name in reversed(list(modules)):
        res = run(target.argv(["kldunload", "-v", f"{name}.ko"]))
        if res.returncode != 0:
            sys.stderr.write(f"error: {kldunload_error(name, res)}\n")
            status = 1
            continue
        out.write(f"{name}: unloaded from {target.label}\n")
    return status
