"""A ``Plan``: one run with every choice made, the input of the pure argv builders."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .backends.accel import AccelChoice
from .config import Disk, GuestSpec, Timeouts


@dataclass(frozen=True)
class Plan:
    run_id: str  # unique per run; part of the run directory's and the VM's name
    name: str  # VM name: qemu -name, bhyve's vmm instance (/dev/vmm/<name>)
    guest: GuestSpec
    backend: str  # "qemu" or "bhyve"
    accel: AccelChoice
    timeouts: Timeouts
    memory_mib: int
    cpus: int
    run_dir: Path  # console log, results; overlay and meta disk while the VM runs
    base: Path  # the read-only base system disk
    base_format: str  # "raw" or "qcow2"
    overlay: Path  # the per-run system disk (removed at teardown unless keep)
    overlay_format: str  # "qcow2" (a qemu-img overlay on base) or "raw" (a sparse copy)
    meta: Path  # the meta disk tar
    seed: Optional[Path] = None  # FreeBSD: the cidata ISO (NoCloud seed)
    kernel: Optional[Path] = None  # stand-in: direct kernel boot
    initrd: Optional[Path] = None
    append: str = ""
    interactive: bool = False
    keep: bool = False
    console: str = "stdio"  # bhyve: stdio or nmdm
    loader: str = "bhyveload"  # bhyve: bhyveload or uefi
    network: bool = False
    firmware: Optional[Path] = None  # bhyve: UEFI firmware
    login: bool = False  # BASIC-CI: log in as root on the console, run the hook from the seed
    script: Optional[Path] = None  # becomes /meta/run.sh
    expect: Optional[Path] = None  # becomes /meta/expect.tsv
    modules_dir: Optional[Path] = None
    modules: Tuple[Path, ...] = ()
    extra: Tuple[Tuple[Path, str], ...] = ()
    qemu_args: Tuple[str, ...] = ()  # qemu: more switches, appended (a TCG plugin)
    notes: Tuple[str, ...] = ()  # things the user should know (shown with the results)
    info: Dict[str, object] = field(default_factory=dict)

    @property
    def console_log(self) -> Path:
        return self.run_dir / "console.log"

    @property
    def vmm_log(self) -> Path:
        """The VM monitor's own stderr (QEMU or bhyve warnings)."""
        return self.run_dir / f"{self.backend}.log"

    @property
    def disks(self) -> List[Disk]:
        disks = [Disk(self.overlay, self.overlay_format, "system"), Disk(self.meta, "raw", "meta")]
        if self.seed is not None:
            disks.append(Disk(self.seed, "raw", "seed", readonly=True, cdrom=True))
        return disks
