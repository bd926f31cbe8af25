"""The bhyve backend (FreeBSD hosts): pure argv builders, exit-status meanings, the backend.

The run follows the steps FreeBSD CI uses for its test VMs:
``bhyvectl --destroy`` before and after (a stale instance of the same name
makes bhyve fail), ``bhyveload`` (or the UEFI firmware) to start the guest's
loader, then ``bhyve`` with virtio-blk disks and COM1 on stdio (or an nmdm
pair).  The system disk is a sparse per-run copy of the raw base image
(bhyve reads no qcow2).

Exit status, from bhyve(8): 0 rebooted, 1 powered off, 2 halted, 3 triple
fault, 4 exited due to an error.  SIGTERM asks the guest to power off (ACPI),
which is the first half of the runner's ``timeout -k``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Dict, List, Optional

from ..config import VMError
from ..plan import Plan
from .base import Stage, VMExit
from .overlay import sparse_copy
from .tools import BHYVE_TOOLS

UEFI_FIRMWARE = Path("/usr/local/share/uefi-firmware/BHYVE_UEFI.fd")  # pkg install edk2-bhyve
VMM_DIR = Path("/dev/vmm")

BHYVE_EXIT: Dict[int, VMExit] = {
    0: VMExit(0, "reboot", False, "the guest rebooted (a panic without the debugger reboots)"),
    1: VMExit(1, "poweroff", True, "the guest powered off"),
    2: VMExit(2, "halt", True, "the guest halted"),
    3: VMExit(3, "triple-fault", False, "the guest triple-faulted"),
    4: VMExit(4, "error", False, "bhyve exited due to an error"),
}


def interpret_exit(code: Optional[int]) -> VMExit:
    if code is None:
        return VMExit(None, "error", False, "bhyve did not start")
    if code < 0:
        return VMExit(code, "signal", False, f"bhyve killed by signal {-code}")
    return BHYVE_EXIT.get(code, VMExit(code, "error", False, f"bhyve exited with unknown status {code}"))


def nmdm_unit(plan: Plan) -> int:
    """A null-modem unit number for this run (nmdm(4) creates the pair on first open)."""
    return 100 + int(plan.run_id.rsplit("-", 1)[-1], 16) % 9000


def console_device(plan: Plan) -> str:
    """What bhyveload -c and bhyve -l com1 get: stdio, or the guest side of an nmdm pair."""
    return "stdio" if plan.console == "stdio" else f"/dev/nmdm{nmdm_unit(plan)}A"


def host_console(plan: Plan) -> Optional[Path]:
    """The side of the nmdm pair the runner reads, or None for stdio."""
    return None if plan.console == "stdio" else Path(f"/dev/nmdm{nmdm_unit(plan)}B")


def destroy_args(plan: Plan) -> List[str]:
    return [BHYVE_TOOLS["bhyvectl"], f"--vm={plan.name}", "--destroy"]


def bhyveload_args(plan: Plan) -> List[str]:
    # The host's userboot loads the guest's loader and kernel from the system disk.
    return [BHYVE_TOOLS["bhyveload"], "-c", console_device(plan), "-m", f"{plan.memory_mib}M",
            "-d", str(plan.overlay), plan.name]


def bhyve_args(plan: Plan, tap: Optional[str] = None) -> List[str]:
    args = [
        BHYVE_TOOLS["bhyve"],
        "-c", str(plan.cpus),
        "-m", f"{plan.memory_mib}M",
        "-A",  # ACPI tables: the guest can power off
        "-H",  # yield the CPU when the guest halts
        "-P",  # exit on PAUSE: a spinning guest does not burn the host
        "-s", "0:0,hostbridge",
        "-s", "1:0,lpc",  # the LPC bridge carries com1 (and the UEFI bootrom)
        "-s", f"2:0,virtio-blk,{plan.overlay}",  # vtbd0: the per-run system disk
        "-s", f"3:0,virtio-blk,{plan.meta}",  # vtbd1: the meta disk
    ]
    if plan.seed is not None:
        args += ["-s", f"4:0,ahci-cd,{plan.seed},ro"]  # cd0: the cidata seed (iso9660/cidata)
    if tap is not None:
        args += ["-s", f"5:0,virtio-net,{tap}"]
    if plan.loader == "uefi":
        args += ["-l", f"bootrom,{plan.firmware or UEFI_FIRMWARE}"]
    args += ["-l", f"com1,{console_device(plan)}", plan.name]
    return args


def tap_create_args() -> List[str]:
    return [BHYVE_TOOLS["ifconfig"], "tap", "create"]


def tap_destroy_args(tap: str) -> List[str]:
    return [BHYVE_TOOLS["ifconfig"], tap, "destroy"]


class BhyveBackend:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.tap: Optional[str] = None
        self._console_fd: Optional[int] = None

    def preflight(self) -> None:
        if os.geteuid() != 0:
            raise VMError("bhyve needs root (it creates a vmm instance)")
        if subprocess.run([BHYVE_TOOLS["kldstat"], "-q", "-m", "vmm"]).returncode != 0:
            proc = subprocess.run([BHYVE_TOOLS["kldload"], "vmm"], capture_output=True, text=True)
            if proc.returncode != 0:
                raise VMError(f"kldload vmm: {proc.stderr.strip() or 'failed'} (bhyve needs VT-x/AMD-V)")
        if self.plan.loader == "uefi" and not (self.plan.firmware or UEFI_FIRMWARE).exists():
            raise VMError(f"{self.plan.firmware or UEFI_FIRMWARE} not found: pkg install edk2-bhyve")
        if self.plan.base_format != "raw":
            raise VMError(f"bhyve needs a raw image, {self.plan.base} is {self.plan.base_format}")

    def overlay_command(self) -> Optional[List[str]]:
        return None

    def make_overlay(self) -> None:
        # A stale instance of the same name would make bhyve fail: destroy first.
        subprocess.run(destroy_args(self.plan), capture_output=True)
        sparse_copy(self.plan.base, self.plan.overlay)
        if self.plan.network:
            proc = subprocess.run(tap_create_args(), capture_output=True, text=True)
            if proc.returncode != 0:
                raise VMError(f"ifconfig tap create: {proc.stderr.strip()}")
            self.tap = proc.stdout.strip()

    def stages(self) -> List[Stage]:
        stages = []
        from_stdout = self.plan.console == "stdio"
        if self.plan.loader == "bhyveload":
            stages.append(Stage(bhyveload_args(self.plan), "bhyveload", from_stdout, self.plan.interactive, is_vm=False))
        stages.append(Stage(bhyve_args(self.plan, self.tap), "bhyve", from_stdout, self.plan.interactive))
        return stages

    def console_reader(self) -> Optional[int]:
        """The nmdm host side, opened before bhyve so that no output is lost."""
        dev = host_console(self.plan)
        if dev is None:
            return None
        if self._console_fd is None:
            self._console_fd = os.open(dev, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY)
        return self._console_fd

    def interpret_exit(self, code: Optional[int]) -> VMExit:
        return interpret_exit(code)

    def cleanup(self) -> List[str]:
        problems = []
        if self._console_fd is not None:
            os.close(self._console_fd)
            self._console_fd = None
        proc = subprocess.run(destroy_args(self.plan), capture_output=True, text=True)
        if proc.returncode != 0 and (VMM_DIR / self.plan.name).exists():
            problems.append(f"bhyvectl --destroy: {proc.stderr.strip()}")
        if self.tap:
            proc = subprocess.run(tap_destroy_args(self.tap), capture_output=True, text=True)
            if proc.returncode != 0:
                problems.append(f"ifconfig {self.tap} destroy: {proc.stderr.strip()}")
            else:
                self.tap = None
        return problems

    def leftovers(self) -> List[str]:
        left = []
        if (VMM_DIR / self.plan.name).exists():
            left.append(f"vmm instance {VMM_DIR / self.plan.name}")
        if self.tap:
            left.append(f"tap device {self.tap}")
        return left

    def commands_for_display(self) -> List[List[str]]:
        cmds = [destroy_args(self.plan)]
        if self.plan.network:
            cmds.append(tap_create_args())
        cmds += [s.argv for s in self.stages()]
        cmds.append(destroy_args(self.plan))
        if self.plan.network:
            cmds.append(tap_destroy_args("tapN"))
        return cmds
