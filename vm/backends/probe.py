"""The quick KVM probe: the stand-in kernel booted under KVM to its hook marker.

``vm.backends.accel`` cannot trust ``/dev/kvm`` (a nested, emulated KVM opens
fine and then crawls), so where the cheaper tests pass it asks this probe to
boot a real kernel.  Working KVM reaches the marker in about a second.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from typing import Optional, Tuple

from ..config import VMConfig, VMError
from ..images import standin
from ..supervise.children import spawn, stop
from ..supervise.console import ConsoleWatcher
from .accel import Probe
from .tools import QEMU


def kvm_probe(cfg: VMConfig) -> Probe:
    """The stand-in kernel, booted under KVM to its marker: the quick probe of vm.backends.accel.

    The kernel is looked up only when the probe runs; None from the probe means
    no probe kernel could be had.
    """

    def probe(limit: float) -> Optional[Tuple[bool, float, str]]:
        try:
            assets = standin.assets(fetch=cfg.guest == "standin")
        except VMError:
            return None

        argv = [QEMU, "-nodefaults", "-no-user-config", "-no-reboot", "-machine", "pc", "-m", "256",
                "-accel", "kvm", "-cpu", "host", "-kernel", str(assets.kernel), "-initrd", str(assets.initramfs),
                "-append", assets.append, "-display", "none", "-serial", "stdio", "-monitor", "none"]
        t0 = time.monotonic()
        proc = spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        watcher = ConsoleWatcher()
        try:
            fd = proc.stdout.fileno()
            while time.monotonic() - t0 < limit:
                r, _, _ = select.select([fd], [], [], 0.2)
                if r:
                    data = os.read(fd, 65536)
                    if not data:
                        break
                    watcher.feed(data)
                    if watcher.first("hook-start"):
                        return True, time.monotonic() - t0, "reached the marker"
            tail = " / ".join(line for line in watcher.tail(3) if line.strip())
            return False, time.monotonic() - t0, tail[-160:] or "no console output"
        finally:
            stop(proc, 1.0)

    return probe
