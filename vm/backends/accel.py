"""Whether ``-accel kvm`` really works on this host, and why; TCG otherwise.

An existing ``/dev/kvm`` proves nothing.  On the machines this project is
developed on it is backed by ``kvm_pvm``, a nested, emulated KVM: QEMU opens
it, KVM_CREATE_VM succeeds, SeaBIOS runs, and then a guest kernel crawls
(``Memory:`` at 30 s of guest time where TCG boots completely in 2 s) and
dies with "KVM internal error ... emulation failure" on ``lock cmpxchg16b`` or
``xrstor64``.  So the decision takes, in order:

1. an explicit request (``--accel`` or ``KINSTKIT_ACCEL``);
2. ``/dev/kvm`` present, readable and writable;
3. the CPU flags: ``vmx`` (Intel VT-x) or ``svm`` (AMD-V) in ``/proc/cpuinfo``.
   A hypervisor that exposes neither cannot host a hardware-virtualized guest
   whatever /dev/kvm says;
4. ``KVM_GET_API_VERSION`` answers 12;
5. a quick probe: the stand-in kernel must boot to its hook marker under KVM
   within ``PROBE_SECONDS`` (about 1 s on working KVM).  Where no probe
   kernel can be had, the choice says it was not probed.

Each answer is an ``AccelChoice`` whose ``reason`` goes into the results.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

KVM_DEV = Path("/dev/kvm")
KVM_GET_API_VERSION = 0xAE00  # _IO(KVMIO, 0x00)
KVM_API_VERSION = 12
PROBE_SECONDS = 10.0  # working KVM boots the stand-in in ~1 s; kvm_pvm shows nothing in 20 s
ENV = "KINSTKIT_ACCEL"


@dataclass(frozen=True)
class AccelChoice:
    """The accelerator a run uses, and why."""

    name: str  # "kvm" or "tcg" (QEMU), "vmm" (bhyve)
    reason: str  # one sentence, for people and the JSON result
    probed: bool = False  # a guest kernel was booted to decide
    probe_seconds: Optional[float] = None

    @property
    def emulated(self) -> bool:
        return self.name == "tcg"

    def to_json(self) -> Dict[str, object]:
        return {"name": self.name, "reason": self.reason, "probed": self.probed, "probe_seconds": self.probe_seconds}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def kvm_modules(sysmod: Path = Path("/sys/module")) -> Tuple[str, ...]:
    try:
        return tuple(sorted(p.name for p in sysmod.iterdir() if p.name.startswith("kvm")))
    except OSError:
        return ()


def kvm_api_version(dev: Path = KVM_DEV) -> Optional[int]:
    try:
        fd = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return fcntl.ioctl(fd, KVM_GET_API_VERSION)
    except OSError:
        return None
    finally:
        os.close(fd)


# A probe boots a kernel under KVM: (reached the marker, seconds, detail), or None
# when it has no kernel to boot.
Probe = Callable[[float], Optional[Tuple[bool, float, str]]]
_CACHE: Dict[str, AccelChoice] = {}


def choose(
    requested: str = "auto",
    probe: Optional[Probe] = None,
    *,
    dev: Path = KVM_DEV,
    cpuinfo: Path = Path("/proc/cpuinfo"),
    use_cache: bool = True,
) -> AccelChoice:
    """Decide between KVM and TCG for QEMU (see the module docstring)."""
    if requested == "auto" and os.environ.get(ENV) in ("kvm", "tcg"):
        return AccelChoice(os.environ[ENV], f"forced by {ENV}={os.environ[ENV]}")
    if requested == "tcg":
        return AccelChoice("tcg", "requested with --accel tcg")
    if requested == "kvm":
        return AccelChoice("kvm", "requested with --accel kvm (not checked)")
    key = f"{dev}:{cpuinfo}:{probe is not None}"
    if use_cache and key in _CACHE:
        return _CACHE[key]
    choice = _decide(probe, dev, cpuinfo)
    _CACHE[key] = choice
    return choice


def _decide(probe: Optional[Probe], dev: Path, cpuinfo: Path) -> AccelChoice:
    if not dev.exists():
        return AccelChoice("tcg", f"no {dev}: KVM is not available, QEMU emulates (TCG)")
    if not os.access(dev, os.R_OK | os.W_OK):
        return AccelChoice("tcg", f"{dev} is not readable and writable by uid {os.geteuid()}: TCG")
    flags = cpu_flags(cpuinfo)
    if not flags & {"vmx", "svm"}:
        mods = ", ".join(kvm_modules()) or "none listed"
        return AccelChoice(
            "tcg",
            f"{dev} exists but the CPU flags show neither vmx nor svm (kvm modules: {mods}): "
            "a nested or emulated KVM that cannot run a guest kernel at speed, so TCG",
        )
    hw = "vmx" if "vmx" in flags else "svm"
    version = kvm_api_version(dev)
    if version != KVM_API_VERSION:
        return AccelChoice("tcg", f"{hw} present but KVM_GET_API_VERSION gave {version}, not {KVM_API_VERSION}: TCG")
    if probe is None:
        return AccelChoice("kvm", f"{hw} in the CPU flags and {dev} answers; not probed (no probe kernel here)")
    answer = probe(PROBE_SECONDS)
    if answer is None:
        return AccelChoice("kvm", f"{hw} in the CPU flags and {dev} answers; not probed (no probe kernel here)")
    ok, seconds, detail = answer
    if ok:
        return AccelChoice("kvm", f"{hw} in the CPU flags and a probe kernel booted under KVM in {seconds:.1f} s",
                           probed=True, probe_seconds=round(seconds, 2))
    return AccelChoice(
        "tcg",
        f"{hw} in the CPU flags, but a probe kernel did not boot under KVM within {PROBE_SECONDS:.0f} s "
        f"({detail}): TCG",
        probed=True,
        probe_seconds=round(seconds, 2),
    )


def forget() -> None:
    """Drop cached decisions (tests)."""
    _CACHE.clear()
