"""``bench_ring0()``: `vm-test --guest linux` timed and sized, beside an unprobed boot of the same guest.

Three measurements, each a whole boot (boot to teardown) under the
accelerator this machine has, with QEMU's peak resident memory (its
``VmHWM``, sampled from /proc while it runs):

- **unprobed**: the guest with the module loaded on an empty table and the
  workload run, nothing armed (the run's capture boot, forced);
- **default**: ``vm-test --guest linux`` with its default function set;
- **default, --jump**: the same set with jump probes wherever the proof
  allows them (docs/jump-probes.md, "The ring-0 guest");
- **ladder** (``ladder=True``): larger and larger function sets (``LEVELS``,
  each adding source files to the default set's: every function the kernel
  built from them, read from its DWARF's compile units with llvm-dwarfdump),
  each armed whole, until one takes more than ``BUDGET_SECONDS`` or fails:
  the largest probe count that still finishes within it is the answer.

The results go into ``vm.json`` (key ``ring0``) and ``vm.md``, beside the
stand-in's cycle (``generator/bench/vm.py``).
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..cli.linuxguest import DEFAULT_FUNCTIONS, VmBooter
from ..common.errors import UserError
from ..run.ring0 import kernel, target
from ..run.ring0 import session as S
from ..image import open_image

BUDGET_SECONDS = 600.0  # "the largest probe count that still finishes in 10 minutes"
# The ladder's rungs beyond the default set: source files (DWARF compile-unit names) or directory prefixes.
LEVELS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    # Each rung adds source files (DWARF compile-unit names) to the default set's, a directory ending in "/".
    ("+ more of the VFS, sys, binfmt", (
        "fs/dcache.c", "fs/inode.c", "fs/readdir.c", "fs/splice.c", "fs/libfs.c", "fs/d_path.c", "fs/namespace.c",
        "fs/binfmt_elf.c", "kernel/cred.c", "kernel/sys.c", "arch/x86/kernel/process.c",
        "arch/x86/kernel/process_64.c")),
    ("+ memory management", (
        "mm/memory.c", "mm/rmap.c", "mm/gup.c", "mm/swap.c", "mm/truncate.c", "mm/util.c", "mm/mprotect.c",
        "mm/page-writeback.c")),
    ("+ the page and slab allocators, the fair scheduler", ("mm/page_alloc.c", "mm/slub.c", "kernel/sched/fair.c")),
    ("every file under fs/, mm/ and kernel/", ("fs/", "mm/", "kernel/")),
)
# The default set's files (vm/guest/linux/functions.txt says how it was made), under every rung.
DEFAULT_FILES = (
    "fs/read_write.c", "fs/open.c", "fs/namei.c", "fs/pipe.c", "fs/exec.c", "fs/file.c", "fs/file_table.c",
    "fs/stat.c", "fs/fcntl.c", "mm/filemap.c", "mm/shmem.c", "kernel/fork.c", "kernel/exit.c", "kernel/signal.c",
    "kernel/sched/core.c", "lib/iov_iter.c", "arch/x86/kernel/signal.c", "mm/mmap.c", "kernel/pid.c")
_ARANGE = re.compile(r"\[(0x[0-9a-f]+), (0x[0-9a-f]+)\)")
_CU_OFFSET = re.compile(r"cu_offset = (0x[0-9a-f]+)")
_CU = re.compile(r"^(0x[0-9a-f]+): DW_TAG_compile_unit")
_NAME = re.compile(r'DW_AT_name\t\("(.*)"\)')


class PeakSampler:
    """The peak resident memory (VmHWM) of the QEMU processes this process starts, sampled every 0.5 s."""

    def __init__(self):
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        me = str(os.getpid())
        while not self._stop.wait(0.5):
            procs: Dict[str, Dict[str, str]] = {}
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                procs[pid] = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            for pid, fields in procs.items():
                if _is_qemu(pid) and _descends(procs, pid, me):
                    hwm = int(fields.get("VmHWM", "0 kB").split()[0])
                    self.peak_kib = max(self.peak_kib, hwm)


def _is_qemu(pid: str) -> bool:
    """Whether the process runs a qemu-system binary: by its argv[0], since ``-name ...,process=`` renames
    the process (its status Name is the run's name)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(argv0).startswith(b"qemu-system")


def _descends(procs: Dict[str, Dict[str, str]], pid: str, ancestor: str) -> bool:
    """Whether ``pid`` was started, directly or through other processes (the VM runner's), by ``ancestor``."""
    seen = set()
    while pid in procs and pid not in seen:
        seen.add(pid)
        pid = procs[pid].get("PPid", "").strip()
        if pid == ancestor:
            return True
    return False


def functions_of_files(vmlinux: Path, files: Sequence[str]) -> List[str]:
    """The names of the functions the kernel built from ``files`` (an entry ending in "/" is a directory),
    from the compile units of its DWARF (llvm-dwarfdump: their address ranges and names)."""
    def dump(*flags: str) -> str:
        try:
            return subprocess.run(["llvm-dwarfdump", *flags, str(vmlinux)], capture_output=True, text=True,
                                  check=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise UserError(f"llvm-dwarfdump {' '.join(flags)} {vmlinux}: {e}") from None

    names: Dict[int, str] = {}
    cu: Optional[int] = None
    for line in dump("--debug-info", "--recurse-depth=0").splitlines():
        m = _CU.match(line)
        if m:
            cu = int(m.group(1), 16)
            continue
        m = _NAME.search(line)
        if m and cu is not None and cu not in names:
            names[cu] = m.group(1)
    headers = sorted(names)
    ranges: List[Tuple[int, int, str]] = []
    unit = ""
    for line in dump("--debug-aranges").splitlines():
        m = _CU_OFFSET.search(line)
        if m:
            # The unit's DIE follows its header: the first DIE offset after the header's offset.
            i = bisect.bisect_right(headers, int(m.group(1), 16))
            unit = names[headers[i]] if i < len(headers) else ""
            continue
        m = _ARANGE.match(line)
        if m:
            ranges.append((int(m.group(1), 16), int(m.group(2), 16), unit))
    ranges.sort()
    starts = [r[0] for r in ranges]
    want = tuple(files)
    out = set()
    for f in open_image(str(vmlinux)).functions():
        if f.section != ".text":  # .init.text is gone once the kernel has booted; the rest is refused by rule
            continue
        i = bisect.bisect_right(starts, f.address) - 1
        if i >= 0 and ranges[i][0] <= f.address < ranges[i][1]:
            unit = ranges[i][2]
            if unit in want or any(w.endswith("/") and unit.startswith(w) for w in want):
                out.add(f.name)
    return sorted(out)


def unprobed_boot(req: S.Request) -> Dict[str, object]:
    """The guest with the module on an empty table and the workload run, nothing armed: timings, peak memory."""
    assets = kernel.assets()
    vmlinux = open_image(str(assets.vmlinux))
    target_ko = target.build(assets)
    with tempfile.TemporaryDirectory(prefix="kinstkit-bench-ring0-") as tmp, PeakSampler() as peak:
        t = time.monotonic()
        b = S.unprobed_boot(req, VmBooter(), assets, vmlinux, target_ko, Path(tmp))
        wall = time.monotonic() - t
    if b.status != "pass":
        raise RuntimeError(f"the unprobed boot did not pass:\n{b.text}")
    return {"status": b.status, "timings": b.timings, "wall": round(wall, 2),
            "peak_rss_mib": round(peak.peak_kib / 1024, 1)}


def probed_run(req: S.Request) -> Dict[str, object]:
    """One whole `vm-test --guest linux` run: its figures, boot-to-teardown, QEMU's peak memory."""
    with PeakSampler() as peak:
        t = time.monotonic()
        try:
            rep = S.run(req, VmBooter())
            d = rep.summary()
        except UserError as e:
            return {"ok": False, "error": str(e), "wall": round(time.monotonic() - t, 2),
                    "peak_rss_mib": round(peak.peak_kib / 1024, 1), "functions_requested": len(req.functions)}
        wall = time.monotonic() - t
    keep = ("ok", "functions_requested", "functions", "functions_tabled", "probes", "probes_armed", "probes_hit",
            "hits", "oracle_hits", "mismatches", "workload_identical", "oops", "windows", "rearmed",
            "interrupts_in_trampolines", "timer_samples", "kinds", "kinds_not_hit", "seconds", "jump")
    out = {k: d[k] for k in keep}
    out.update(vm=d["vm"]["timings"], vm_status=d["vm"]["status"], wall=round(wall, 2),
               peak_rss_mib=round(peak.peak_kib / 1024, 1))
    return out


def bench_ring0(ladder: bool = False, runs_dir: Optional[str] = None) -> Dict[str, object]:
    """The unprobed boot, the default run and (``ladder``) the largest set within ``BUDGET_SECONDS``."""
    default = S.default_functions(DEFAULT_FUNCTIONS)
    base = S.Request(functions=default, timeout=BUDGET_SECONDS * 3, runs_dir=runs_dir)
    result: Dict[str, object] = {"default": probed_run(base)}  # first: it also fills the capture cache
    result["default_jump"] = probed_run(dataclasses.replace(base, jump=True))
    result["unprobed"] = unprobed_boot(base)
    if ladder:
        rungs: List[Dict[str, object]] = [dict(result["default"], level="default set")]
        vmlinux = kernel.assets().vmlinux
        files: Tuple[str, ...] = DEFAULT_FILES
        for level, more in LEVELS:
            files += more
            names = tuple(functions_of_files(vmlinux, files))
            run = dict(probed_run(S.Request(functions=names, timeout=BUDGET_SECONDS * 3, runs_dir=runs_dir)),
                       level=level)
            rungs.append(run)
            if not run.get("ok") or float(run["vm"]["total"] or 0) > BUDGET_SECONDS:
                break
        within = [r for r in rungs if r.get("ok") and float(r["vm"]["total"] or 0) <= BUDGET_SECONDS]
        result["ladder"] = rungs
        result["largest_within_budget"] = max(within, key=lambda r: r["probes_armed"])["probes_armed"] if within else 0
        result["budget_seconds"] = BUDGET_SECONDS
    return result
