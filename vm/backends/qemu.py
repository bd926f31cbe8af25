"""The QEMU backend (Linux hosts): small pure builders, one per concern, and the backend.

``qemu_args(plan)`` is the whole command line; each ``*_args`` returns one
concern's switches, with the reason for each beside it.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import List, Optional

from ..config import VMError
from ..plan import Plan
from .base import Stage, VMExit
from .overlay import sparse_copy
from .tools import QEMU, QEMU_IMG


def base_args(plan: Plan) -> List[str]:
    return [
        QEMU,
        "-name", f"{plan.name},process={plan.name}",  # findable in ps; the run id is in it
        "-nodefaults",  # no default NIC, VGA, floppy, CD-ROM, parallel port or monitor
        "-no-user-config",
        "-no-reboot",  # a guest reboot ends QEMU: with panic=-1 (Linux) or debugger_on_panic=0 (FreeBSD) a panic ends the run
    ]


def machine_args(plan: Plan) -> List[str]:
    # i440fx: SeaBIOS boots FreeBSD's pmbr/gptboot; the PVH option ROM enters a vmlinux directly.
    return ["-machine", "pc", "-m", str(plan.memory_mib), "-smp", str(plan.cpus)]


def accel_args(plan: Plan) -> List[str]:
    if plan.accel.name == "kvm":
        return ["-accel", "kvm", "-cpu", "host"]  # only when vm.backends.accel found KVM working
    # TCG: QEMU's default qemu64 CPU is x86-64 baseline, which both guests need and no more.
    return ["-accel", "tcg"]


def kernel_args(plan: Plan) -> List[str]:
    if plan.kernel is None:
        return []  # boot from the system disk
    args = ["-kernel", str(plan.kernel)]
    if plan.initrd is not None:
        args += ["-initrd", str(plan.initrd)]
    return args + ["-append", plan.append]


def disk_args(plan: Plan) -> List[str]:
    args: List[str] = []
    for i, d in enumerate(plan.disks):
        if d.cdrom:
            # The NoCloud seed: a read-only ATAPI CD (FreeBSD: /dev/cd0, label iso9660/cidata).
            args += ["-drive", f"if=ide,index=2,media=cdrom,readonly=on,format=raw,file={d.path}"]
            continue
        ro = ",readonly=on" if d.readonly else ""
        # virtio-blk, attached in order: system disk vtbd0/vda, meta disk vtbd1/vdb.
        # The system disk boots first (SeaBIOS would otherwise also try the meta disk and the CD).
        boot = ",bootindex=0" if d.role == "system" and plan.kernel is None else ""
        args += ["-drive", f"if=none,id={d.role},format={d.format},file={d.path}{ro}",
                 "-device", f"virtio-blk-pci,drive={d.role}{boot}"]
    return args


def console_args(plan: Plan) -> List[str]:
    if plan.interactive:
        # vm-shell: the serial console and the monitor share this terminal (Ctrl-A X quits,
        # Ctrl-A C switches to the monitor); QEMU itself logs the console.
        return ["-display", "none",
                "-chardev", f"stdio,id=con0,mux=on,signal=off,logfile={plan.console_log}",
                "-serial", "chardev:con0", "-mon", "chardev=con0,mode=readline"]
    # vm-test: COM1 on QEMU's stdout (our pipe), input from our stdin pipe; no monitor.
    return ["-display", "none", "-serial", "stdio", "-monitor", "none"]


def net_args(plan: Plan) -> List[str]:
    if not plan.network:
        return []  # -nodefaults already left the NIC out: the meta disk needs no network
    return ["-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0"]


def qemu_args(plan: Plan) -> List[str]:
    return (base_args(plan) + machine_args(plan) + accel_args(plan) + kernel_args(plan)
            + disk_args(plan) + net_args(plan) + console_args(plan) + list(plan.qemu_args))


def overlay_args(plan: Plan) -> List[str]:
    """qemu-img: a qcow2 overlay whose backing file, the base, QEMU opens read-only."""
    return [QEMU_IMG, "create", "-q", "-f", "qcow2", "-F", plan.base_format, "-b", str(plan.base), str(plan.overlay)]


def interpret_exit(code: Optional[int]) -> VMExit:
    if code is None:
        return VMExit(None, "error", False, "QEMU did not start")
    if code == 0:
        # -no-reboot: a guest power-off and a guest reboot both end QEMU with 0;
        # the hook's markers tell them apart.
        return VMExit(0, "exited", True, "QEMU exited: the guest powered off or rebooted")
    if code < 0:
        return VMExit(code, "signal", False, f"QEMU killed by signal {-code}")
    return VMExit(code, "error", False, f"QEMU failed with exit status {code} (see {QEMU}.log)")


class QemuBackend:
    """One QEMU process; a qcow2 overlay (or a sparse copy without qemu-img)."""

    def __init__(self, plan: Plan):
        self.plan = plan

    def preflight(self) -> None:
        if shutil.which(QEMU) is None:
            raise VMError(f"{QEMU} not found: install qemu-system-x86")

    def overlay_command(self) -> Optional[List[str]]:
        return overlay_args(self.plan) if self.plan.overlay_format == "qcow2" else None

    def make_overlay(self) -> None:
        cmd = self.overlay_command()
        if cmd is None:
            sparse_copy(self.plan.base, self.plan.overlay)
            return
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise VMError(f"qemu-img create: {proc.stderr.strip() or proc.returncode}")

    def stages(self) -> List[Stage]:
        return [Stage(qemu_args(self.plan), "qemu", interactive=self.plan.interactive)]

    def interpret_exit(self, code: Optional[int]) -> VMExit:
        return interpret_exit(code)

    def console_reader(self):
        return None  # the console is QEMU's stdout

    def cleanup(self) -> List[str]:
        return []  # nothing outside the process and the run directory

    def leftovers(self) -> List[str]:
        return []

    def commands_for_display(self) -> List[List[str]]:
        cmds = []
        if self.overlay_command():
            cmds.append(self.overlay_command())
        return cmds + [s.argv for s in self.stages()]


def qemu_version() -> Optional[str]:
    if shutil.which(QEMU) is None:
        return None
    out = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else None


def have_qemu_img() -> bool:
    return shutil.which(QEMU_IMG) is not None

