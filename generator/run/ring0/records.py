"""The records of a ring-0 run: what the user asked, what a boot is and gave back, and the run's state.

Kept apart from ``session`` (which runs) and ``report`` (which judges), which
both use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Protocol, Tuple

from . import kernel
from . import plan as guest_plan
from .jumps import NO_JUMPS, GuestJumps

WORKLOAD = Path(__file__).resolve().parents[3] / "vm" / "guest" / "linux" / "workload.sh"


@dataclass(frozen=True)
class Request:
    """What the user asked for (the command line's options)."""

    functions: Tuple[str, ...]  # names as a user writes them
    workload: Path = WORKLOAD
    cpus: int = 2
    memory_mib: int = 512
    cycles: int = 3  # disarm/re-arm cycles while the workload runs
    rule: str = guest_plan.GUEST_PROLOGUE_RULE
    timeout: float = 600.0  # the probe boot's whole-run limit, seconds
    keep: bool = False  # keep the VMs' disks
    runs_dir: Optional[str] = None  # where vm-test's run directories go
    breakage: str = ""  # tests only: a name of kbuild.BREAKS, the glue built broken on purpose
    jump: bool = False  # jump probes where the proof allows them (--jump), breakpoints elsewhere


@dataclass(frozen=True)
class Boot:
    """One boot the session asks the runner for."""

    mode: str  # "capture" or "probe" (vm/guest/linux/run.sh)
    module_dir: Path  # holds kinst.ko
    extra: Tuple[Tuple[Path, str], ...]  # more meta-disk files: (host path, name in the guest)
    qemu_args: Tuple[str, ...]  # the plugin, in probe mode
    cpus: int
    memory_mib: int
    timeout: float  # whole run, seconds
    image_root: Path  # the unpacked linux-image package
    keep: bool = False
    runs_dir: Optional[str] = None


@dataclass(frozen=True)
class Booted:
    """What one boot gave back."""

    status: str  # vm-test's: "pass", "fail" or "error"
    end: str  # how the VM ended ("poweroff", "timeout", "panic", ...)
    run_dir: Path  # console.log, result.json, out/
    out: Path  # the guest's out/ (may be missing files when it failed)
    console_log: Path
    timings: Dict[str, Optional[float]]  # boot, run, collect, teardown, total (seconds)
    failed: Tuple[str, ...]  # "check: reason" of every check that did not pass
    text: str  # vm-test's own report


class Booter(Protocol):
    """The VM runner, as the session sees it."""

    def boot(self, request: Boot) -> Booted: ...

    def identity(self, cpus: int) -> Tuple[str, ...]:
        """Everything about a boot that decides the kernel's live text (QEMU, CPU model, command line)."""
        ...


@dataclass
class Session:
    """The state of one run, for the report."""

    request: Request
    assets: Optional[kernel.KernelAssets] = None
    rules_line: str = ""
    capture: Optional[Booted] = None  # None when the live image and reference came from the cache
    probe: Optional[Booted] = None
    guest: Optional[guest_plan.GuestPlan] = None
    module: Optional[Path] = None
    jumps: GuestJumps = NO_JUMPS  # the jump probes placed (none without --jump)
    seconds: Dict[str, float] = field(default_factory=dict)  # stage -> wall seconds
    notes: List[str] = field(default_factory=list)
