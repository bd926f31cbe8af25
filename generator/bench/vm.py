"""``bench_vm()``: the stand-in guest's whole cycle, timed, under the accelerator this machine really has.

One cycle is what ``invoke vm-test --guest standin`` does: plan, overlay and
meta disk, boot to the hook, run the default checks, power off, read the
results back, tear down.  The inputs (kernel package, vmlinux, initramfs)
are built once before timing and reported separately.  Results go to
``bench/results/vm.json`` and a short ``vm.md``; the goal is a cycle under
10 s under TCG.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from ..common.files import write_all
from ..common.paths import BENCH_RESULTS
from vm.backends import accel as accel_mod
from vm.backends.probe import kvm_probe
from vm.backends.qemu import qemu_version
from vm.config import VMConfig
from vm.images import standin
from vm.runner import run

GOAL_SECONDS = 10.0
PHASES = ("boot", "run", "collect", "teardown", "total")


def bench_vm(out_dir: Path = BENCH_RESULTS, runs: int = 3, ring0: bool = True,
             ladder: bool = False) -> Dict[str, object]:
    """Time ``runs`` whole stand-in cycles, and (``ring0``) the Linux guest's runs beside an unprobed boot
    (``generator.bench.ring0``; ``ladder``: the largest probe count within 10 minutes); write vm.json and
    vm.md into ``out_dir``."""
    t0 = time.monotonic()
    assets = standin.assets()
    prepare = time.monotonic() - t0
    choice = accel_mod.choose("auto", kvm_probe(VMConfig()))
    cycles: List[Dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="kinstkit-bench-vm-") as tmp:
        for i in range(runs):
            t = time.monotonic()
            res = run(VMConfig(runs_dir=tmp))
            wall = time.monotonic() - t
            cycles.append({"status": res.status, "wall": round(wall, 3), **{k: res.timings.get(k) for k in PHASES}})
            if res.status != "pass":
                raise RuntimeError(f"bench cycle {i + 1} did not pass:\n{res.text()}")
    median = {k: round(statistics.median(float(c[k]) for c in cycles), 3) for k in PHASES + ("wall",)}
    result = {
        "benchmark": "vm-test stand-in guest: whole cycle (plan, overlay, meta disk, boot, checks, collect, teardown)",
        "command": "python -m generator bench (generator.bench.vm.bench_vm())",
        "accel": choice.to_json(),
        "guest": {"kernel": f"{assets.package} ({assets.kernel_kind})", "initramfs": assets.initramfs.name,
                  "memory_mib": 256, "cpus": 1},
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "qemu": qemu_version(), "kernel": platform.release()},
        "inputs_prepare_seconds": round(prepare, 3),
        "runs": cycles,
        "median": median,
        "goal_seconds": GOAL_SECONDS,
        "goal_met": median["wall"] < GOAL_SECONDS,
    }
    if ring0:
        from .ring0 import bench_ring0

        with tempfile.TemporaryDirectory(prefix="kinstkit-bench-ring0-") as tmp:
            result["ring0"] = bench_ring0(ladder=ladder, runs_dir=tmp)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = _markdown(result) + (_ring0_markdown(result["ring0"]) if ring0 else "")
    write_all([(out_dir / "vm.json", json.dumps(result, indent=1) + "\n"), (out_dir / "vm.md", text)])
    return result


def _ring0_markdown(r: Dict[str, object]) -> str:
    d, u = r["default"], r["unprobed"]
    lines = [
        "",
        "# vm-test --guest linux: the kinst core in ring 0, beside an unprobed boot",
        "",
        "`python -m generator bench` (`generator.bench.ring0.bench_ring0()`): Debian's Linux 6.1 cloud kernel, "
        "2 vCPUs, 512 MiB, the default workload; boot to teardown as vm-test times it, and QEMU's peak "
        "resident memory (VmHWM).  The unprobed boot loads the module on an empty table and runs the workload "
        "with nothing armed.",
        "",
        "| run | probes armed | probes hit | hits (= QEMU's) | boot (s) | run (s) | boot to teardown (s) | "
        "whole command (s) | QEMU peak RSS (MiB) | result |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| unprobed | 0 | 0 | 0 | {u['timings']['boot']} | {u['timings']['run']} | {u['timings']['total']} | "
        f"{u['wall']} | {u['peak_rss_mib']} | {u['status']} |",
    ]
    rungs = r.get("ladder") or [dict(d, level="default set")]
    if "default_jump" in r:  # beside the default set's breakpoints: its jump probes
        rungs = rungs[:1] + [dict(r["default_jump"], level="default set, --jump")] + rungs[1:]
    for x in rungs:
        if "error" in x:
            lines.append(f"| {x['level']} ({x['functions_requested']} names) | - | - | - | - | - | - | {x['wall']} | "
                         f"{x['peak_rss_mib']} | error: {x['error']} |")
            continue
        vm = x["vm"]
        j = x.get("jump")
        if j:  # armed: jump probes + breakpoints; the displaced are not probed
            x = dict(x, level=f"{x['level']}: {j['jump_probes_armed']} jumps (displacing {j['displaced']}) and "
                              f"{j['trap_probes_armed']} breakpoints")
        lines.append(f"| {x['level']} ({x['functions']} functions) | {x['probes_armed']} | {x['probes_hit']} | "
                     f"{x['hits']} ({'=' if x['hits'] == x['oracle_hits'] else '!='}) | {vm['boot']} | {vm['run']} | "
                     f"{vm['total']} | {x['wall']} | {x['peak_rss_mib']} | {'PASS' if x['ok'] else 'FAIL'} |")
    if "largest_within_budget" in r:
        lines += ["", f"Largest probe count armed at once whose run finished within {r['budget_seconds']:.0f} s "
                  f"(boot to teardown): **{r['largest_within_budget']}**."]
    lines += ["", f"Default run's stages (s): " + ", ".join(f"{k} {v}" for k, v in d.get("seconds", {}).items()), ""]
    return "\n".join(lines)


def _markdown(r: Dict[str, object]) -> str:
    m = r["median"]
    a = r["accel"]
    lines = [
        "# vm-test: the stand-in guest's whole cycle",
        "",
        f"`{r['command']}`: {len(r['runs'])} cycles of `invoke vm-test --guest standin`, timed.",
        f"Accelerator: **{a['name']}** ({a['reason']}).",
        f"Guest: {r['guest']['kernel']}, busybox initramfs, {r['guest']['memory_mib']} MiB, 1 CPU; "
        f"{r['host']['qemu']}.",
        "",
        "| phase | median (s) |",
        "|---|---|",
    ]
    lines += [f"| {k} | {m[k]:.2f} |" for k in PHASES]
    lines += [f"| wall (run() call) | {m['wall']:.2f} |", "",
              f"Goal: under {r['goal_seconds']:.0f} s: **{'met' if r['goal_met'] else 'missed'}**.  "
              f"Inputs (kernel package, vmlinux, initramfs) prepared once beforehand: "
              f"{r['inputs_prepare_seconds']:.2f} s (cached after the first time).", ""]
    return "\n".join(lines)
