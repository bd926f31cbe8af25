"""What a VM run is asked to do: ``VMConfig``, the ``GUESTS`` table and ``validate()``.

``VMConfig`` is what the user said (every field's default is stated beside it
and checked by ``tests/unit/test_vm_host.py::test_default_vmconfig``).  ``validate``
rejects contradictory or impossible requests before anything is downloaded,
built or booted, naming the option at fault.  Per-guest facts (memory, how
long a boot may take, the default guest script) are data in ``GUESTS``.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

from ._common import paths
from ._common import errors

from .backends.tools import BHYVE_TOOLS, QEMU

GUEST_DIR = Path(__file__).resolve().parent / "guest"
# Downloads and derived guest assets (gitignored): stand-in kernel, FreeBSD images.
CACHE = paths.CACHE / "vm"
# One directory per run: console log, result.json, and (with --keep) the overlay.
RUNS = paths.BUILD / "vm"
# Where `invoke build` puts modules: build/<kernel-build-id>/<module>.ko.
BUILD = paths.BUILD

RELEASE_RE = re.compile(r"^\d+\.\d+-(RELEASE|BETA\d+|RC\d+)$")


class VMError(errors.UserError):
    """A request or an environment the runner cannot work with (exit status 2)."""


@dataclass(frozen=True)
class GuestSpec:
    """Facts about one kind of guest."""

    name: str
    description: str
    backends: Tuple[str, ...]  # backends that can boot it ("qemu", "bhyve")
    memory_mib: int  # guest RAM
    cpus: int  # virtual CPUs
    boot_timeout: float  # seconds from start to the hook's first marker, with hardware virtualization
    run_timeout: float  # seconds for the whole run, with hardware virtualization
    tcg_factor: float  # both limits are multiplied by this under TCG (pure emulation)
    script: Path  # the default guest script (run as /meta/run.sh)
    expect: Path  # the default expected-output specs (/meta/expect.tsv)
    wants_modules: bool  # default --modules is build/<build-id>/ (True) or none (False)


GUESTS: Dict[str, GuestSpec] = {
    "standin": GuestSpec(
        name="standin",
        description="Debian's Linux kernel + a busybox initramfs that follows the FreeBSD hook's contract",
        backends=("qemu",),  # direct kernel boot (PVH); bhyve cannot boot a Linux kernel without grub-bhyve
        memory_mib=256,
        cpus=1,
        boot_timeout=20.0,  # ~1 s with KVM; ~3 s measured under TCG (x3 below)
        run_timeout=120.0,
        tcg_factor=3.0,
        script=GUEST_DIR / "standin" / "checks.sh",
        expect=GUEST_DIR / "standin" / "expect.tsv",
        wants_modules=False,
    ),
    "linux": GuestSpec(
        name="linux",
        description="a Debian Linux kernel package (VMConfig.image_package) + a busybox initramfs, for the "
        "ring-0 runs of kinstkit's kinst core (generator/run/ring0)",
        backends=("qemu",),  # direct kernel boot (PVH), as the stand-in
        memory_mib=512,
        cpus=2,  # the ring-0 runs want both vCPUs in probed code at once
        boot_timeout=20.0,  # ~5 s measured under TCG to the hook (x3 below)
        run_timeout=300.0,  # ring-0 runs pass their own --timeout
        tcg_factor=3.0,
        script=GUEST_DIR / "linux" / "run.sh",
        expect=GUEST_DIR / "linux" / "expect.tsv",
        wants_modules=False,
    ),
    "freebsd": GuestSpec(
        name="freebsd",
        description="an official FreeBSD VM image (BASIC-CLOUDINIT, or BASIC-CI) with a cloud-init NoCloud seed",
        backends=("bhyve", "qemu"),
        memory_mib=2048,
        cpus=2,
        boot_timeout=180.0,  # loader + kernel + firstboot rc scripts up to nuageinit's user-data
        run_timeout=900.0,
        tcg_factor=5.0,  # FreeBSD under TCG: not measurable here (no image); budget generously
        script=GUEST_DIR / "freebsd" / "kinstkit-test.sh",
        expect=GUEST_DIR / "freebsd" / "expect.tsv",
        wants_modules=True,
    ),
}

BACKENDS = ("auto", "qemu", "bhyve")
ACCELS = ("auto", "kvm", "tcg")
CONSOLES = ("stdio", "nmdm")  # bhyve com1: our pipe, or a null-modem pair we read
LOADERS = ("bhyveload", "uefi")  # bhyve: the host's userboot, or the UEFI firmware


@dataclass(frozen=True)
class VMConfig:
    """One VM run as requested.  ``None`` means "the guest's default"."""

    guest: str = "standin"  # a key of GUESTS; --image/--release imply "freebsd"
    image: Optional[str] = None  # FreeBSD: a base image (raw or qcow2), never written
    release: Optional[str] = None  # FreeBSD: e.g. "14.3-RELEASE", fetched with vm-image
    flavor: str = "BASIC-CLOUDINIT"  # FreeBSD image flavor for --release
    backend: str = "auto"  # auto: bhyve on FreeBSD, qemu elsewhere
    accel: str = "auto"  # qemu: auto (KVM only when it really works), kvm or tcg
    script: Optional[str] = None  # guest script instead of the guest's default checks
    expect: Optional[str] = None  # expected-output specs for --script (default: none)
    modules: Optional[str] = None  # directory of .ko files; None: build/<build-id>/ or none (stand-in)
    extra: Tuple[Tuple[str, str], ...] = ()  # more (file, name in the meta disk) pairs
    memory_mib: Optional[int] = None  # None: the guest's default
    cpus: Optional[int] = None  # None: the guest's default
    boot_timeout: Optional[float] = None  # None: the guest's, x tcg_factor under TCG
    timeout: Optional[float] = None  # whole run; None: the guest's, x tcg_factor under TCG
    kill_after: float = 5.0  # like timeout -k: SIGTERM at a limit, SIGKILL this much later
    panic_grace: float = 0.5  # after a panic line, read the console this long for the backtrace
    keep: bool = False  # keep the overlay and meta disk in the run directory
    interactive: bool = False  # vm-shell: the serial console on this terminal
    runs_dir: Optional[str] = None  # None: build/vm/
    console: str = "stdio"  # bhyve: com1 on stdio or on an nmdm pair
    loader: str = "bhyveload"  # bhyve: bhyveload or uefi
    network: bool = False  # bhyve: a tap device (created and destroyed per run); qemu: user net
    mirror: Optional[str] = None  # FreeBSD download mirror for --release (default: download.freebsd.org)
    dry_run: bool = False  # print the commands, start nothing
    extra_append: str = ""  # stand-in, linux: more kernel command line
    image_package: Optional[str] = None  # linux: an unpacked linux-image package (boot/vmlinuz-*, lib/modules/)
    qemu_args: Tuple[str, ...] = ()  # qemu: more switches, appended (the linux guest's -plugin)


def host_os() -> str:
    return sys.platform


def validate(cfg: VMConfig) -> None:
    """Reject a request that cannot work, before any work starts, naming the option."""
    if cfg.image or cfg.release:
        if cfg.guest != "freebsd":
            raise VMError(f"--image/--release select a FreeBSD guest; they do not go with --guest {cfg.guest}")
    if cfg.guest not in GUESTS:
        raise VMError(f"unknown guest '{cfg.guest}' (known: {', '.join(GUESTS)})")
    spec = GUESTS[cfg.guest]
    if cfg.guest == "linux" and not (cfg.image_package and (Path(cfg.image_package) / "boot").is_dir()):
        raise VMError(f"the linux guest needs an unpacked linux-image package (image_package), not "
                      f"{cfg.image_package!r}; vm-test --guest linux fetches one")
    if cfg.qemu_args and resolve_backend(cfg) != "qemu":
        raise VMError("qemu_args are QEMU switches; they do not go with bhyve")
    if cfg.guest == "freebsd":
        if bool(cfg.image) == bool(cfg.release):
            raise VMError("a FreeBSD guest needs exactly one of --image PATH and --release R")
        if cfg.image and not Path(cfg.image).is_file():
            raise VMError(f"--image {cfg.image}: no such file")
        if cfg.release and not RELEASE_RE.match(cfg.release):
            raise VMError(f"--release {cfg.release}: expected a name like 14.3-RELEASE")
    if cfg.backend not in BACKENDS:
        raise VMError(f"--backend {cfg.backend}: expected one of {', '.join(BACKENDS)}")
    if cfg.accel not in ACCELS:
        raise VMError(f"--accel {cfg.accel}: expected one of {', '.join(ACCELS)}")
    backend = resolve_backend(cfg)
    if backend not in spec.backends:
        raise VMError(f"the {cfg.guest} guest cannot run under {backend} (it runs under {', '.join(spec.backends)})")
    if backend == "bhyve" and cfg.accel not in ("auto", "kvm"):
        raise VMError("--accel tcg is a QEMU setting; bhyve always uses the vmm hypervisor")
    if cfg.console not in CONSOLES:
        raise VMError(f"--console {cfg.console}: expected one of {', '.join(CONSOLES)}")
    if cfg.loader not in LOADERS:
        raise VMError(f"--loader {cfg.loader}: expected one of {', '.join(LOADERS)}")
    for flag, path in (("--script", cfg.script), ("--expect", cfg.expect)):
        if path and not Path(path).is_file():
            raise VMError(f"{flag} {path}: no such file")
    if cfg.expect and not cfg.script:
        raise VMError("--expect goes with --script (the default checks bring their own specs)")
    if cfg.modules and not Path(cfg.modules).is_dir():
        raise VMError(f"--modules {cfg.modules}: not a directory")
    for src, name in cfg.extra:
        if not Path(src).exists():
            raise VMError(f"extra meta-disk file {src}: no such file")
        if name.startswith("/") or ".." in Path(name).parts or name.split("/")[0] in ("out", "run.sh", "expect.tsv"):
            raise VMError(f"extra meta-disk name {name}: must be relative and not a reserved name")
    for flag, value in (("--timeout", cfg.timeout), ("--boot-timeout", cfg.boot_timeout)):
        if value is not None and value <= 0:
            raise VMError(f"{flag} {value}: must be positive")
    if cfg.timeout is not None and cfg.boot_timeout is not None and cfg.boot_timeout > cfg.timeout:
        raise VMError(f"--boot-timeout {cfg.boot_timeout} is longer than the whole-run --timeout {cfg.timeout}")
    if cfg.kill_after < 0 or cfg.panic_grace < 0:
        raise VMError("kill_after and panic_grace cannot be negative")
    if cfg.memory_mib is not None and cfg.memory_mib < 64:
        raise VMError(f"--memory {cfg.memory_mib}: at least 64 MiB")
    if cfg.cpus is not None and cfg.cpus < 1:
        raise VMError(f"--cpus {cfg.cpus}: at least 1")
    if not cfg.dry_run:
        _check_tools(backend, cfg)


def resolve_backend(cfg: VMConfig) -> str:
    if cfg.backend != "auto":
        return cfg.backend
    if cfg.guest == "freebsd" and host_os().startswith("freebsd"):
        return "bhyve"
    return "qemu"


def _check_tools(backend: str, cfg: VMConfig) -> None:
    if backend == "qemu":
        if shutil.which(QEMU) is None:
            raise VMError(f"{QEMU} not found: install the qemu-system-x86 package (./bootstrap does)")
        return
    for tool in (BHYVE_TOOLS["bhyve"], BHYVE_TOOLS["bhyvectl"]) + (
        (BHYVE_TOOLS["bhyveload"],) if cfg.loader == "bhyveload" else ()
    ):
        if shutil.which(tool) is None:
            raise VMError(f"{tool} not found: the bhyve backend needs a FreeBSD host (base system)")
    if os.geteuid() != 0:
        raise VMError("bhyve needs root (it creates a vmm instance)")


def default_modules_dir(build: Path = BUILD) -> Optional[Path]:
    """The newest ``build/<kernel-build-id>/`` holding ``.ko`` files, or None.

    ``invoke build`` writes ``build/<kernel-build-id>/<module>.ko``; other
    directories under build/ (sample, harness, vm) hold no ``.ko`` at their
    top level.
    """
    if not build.is_dir():
        return None
    cands = [d for d in build.iterdir() if d.is_dir() and d.name != "vm" and any(d.glob("*.ko"))]
    if not cands:
        return None
    return max(cands, key=lambda d: max(p.stat().st_mtime for p in d.glob("*.ko")))


@dataclass(frozen=True)
class Timeouts:
    """The limits of one run, after the guest defaults and the accelerator are applied."""

    boot: float  # start -> hook-start marker
    run: float  # start -> VM gone (the whole run)
    kill_after: float  # SIGTERM -> SIGKILL
    panic_grace: float  # panic line -> stop

    @staticmethod
    def for_run(cfg: VMConfig, spec: GuestSpec, emulated: bool) -> "Timeouts":
        factor = spec.tcg_factor if emulated else 1.0
        run = cfg.timeout if cfg.timeout is not None else spec.run_timeout * factor
        boot = cfg.boot_timeout if cfg.boot_timeout is not None else min(spec.boot_timeout * factor, run)
        return Timeouts(boot=boot, run=run, kill_after=cfg.kill_after, panic_grace=cfg.panic_grace)


@dataclass(frozen=True)
class Disk:
    """One disk of the VM, in attach order (system disk first: vtbd0 / vda)."""

    path: Path
    format: str  # "raw" or "qcow2"
    role: str  # "system", "meta" or "seed"
    readonly: bool = False
    cdrom: bool = False


# Kept so tests can state them: the fields whose defaults are part of the interface.
DEFAULTS = {f: getattr(VMConfig(), f) for f in VMConfig.__dataclass_fields__}
