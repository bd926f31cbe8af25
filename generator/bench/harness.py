"""Harness benchmark: what one probe hit costs, against a bare trap measured in the same run."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from ..common.errors import UserError
from ..common.files import write_all
from ..common.paths import BENCH_RESULTS, REPO
from ..run.audit import audit_env, read_hits
from ..run.harness import BUILD_DIR, build, gcc
from ..run.process import Run, run_command


BENCH_SRC = REPO / "bench" / "harness"  # the floor and the hot loop, in C


def bench_harness(out_dir: Path = BENCH_RESULTS, calls: int = 100_000, repeat: int = 3) -> dict:
    """Hits per second of the harness against a bare SIGTRAP + trampoline round trip.

    Both are measured in this call, on this machine, interleaved ``repeat``
    times (the median is reported): ``bench/harness/trap_floor.c`` is the
    floor (int3 over one instruction; a handler that checks %rip, counts and
    sets %rip to a trampoline; nothing else).  The harness side probes every
    instruction of a function of ``bench/harness/hot.c`` with the generated
    core and the real audit library, and ``hot_main`` times the same loop
    plain and probed; cost per hit = (probed - plain) / hits.  Results go to
    ``harness.json`` and ``harness.md`` in ``out_dir``.
    """
    cc = gcc()
    out_dir = Path(out_dir)
    work = BUILD_DIR / "bench"
    work.mkdir(parents=True, exist_ok=True)
    flags = ["-O2", "-fno-omit-frame-pointer", "-mno-red-zone", "-Wall", "-Werror"]
    steps = [
        [cc, *flags, "-o", str(work / "trap_floor"), str(BENCH_SRC / "trap_floor.c")],
        [cc, *flags, "-fPIC", "-shared", "-o", str(work / "libhot.so"), str(BENCH_SRC / "hot.c")],
        [cc, *flags, "-o", str(work / "hot_main"), str(BENCH_SRC / "hot_main.c"), f"-L{work}", "-lhot",
         f"-Wl,-rpath,{work}"],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["(no output)"])[0]
            raise UserError(f"bench build failed: {Path(cmd[-1]).name}: {first}")
    lib = str(work / "libhot.so")
    functions = (("hot_lea", "trampoline only"), ("hot_call", "with call emulation"))
    builds = {fn: build(lib, [fn]) for fn, _ in functions}
    floor_runs: List[float] = []
    samples: Dict[str, List[dict]] = {fn: [] for fn, _ in functions}
    for _ in range(repeat):
        hits_per_call = 5
        f = _bench_out(run_command([str(work / "trap_floor"), str(calls * hits_per_call)], dict(os.environ)),
                       "trap_floor")
        floor_runs.append(f["ns_per_hit"])
        for fn, _ in functions:
            plain = _bench_out(run_command([str(work / "hot_main"), fn, str(calls)], dict(os.environ)), "hot_main")
            with tempfile.TemporaryDirectory(prefix="kinst-bench-") as tmp:
                prefix = Path(tmp) / "hits"
                r = run_command([str(work / "hot_main"), fn, str(calls)], audit_env(builds[fn].lib, prefix, "probe"))
                probed = _bench_out(r, "hot_main " + fn + " (probed)")
                hits = sum(read_hits(prefix, len(builds[fn].probes))[0])
            if probed.get("sum") != plain.get("sum"):
                raise UserError(f"bench: {fn} computed a different result under the harness")
            samples[fn].append({
                "plain": plain["ns_per_call"], "probed": probed["ns_per_call"], "hits": hits,
                "ns_per_hit": (probed["ns_per_call"] - plain["ns_per_call"]) * calls / max(hits, 1),
            })
    floor_ns = statistics.median(floor_runs)
    harness = {}
    for fn, what in functions:
        ns = statistics.median(s["ns_per_hit"] for s in samples[fn])
        harness[fn] = {
            "what": what,
            "probes": len(builds[fn].probes),
            "calls": calls,
            "hits": samples[fn][0]["hits"],
            "hits_per_call": samples[fn][0]["hits"] / calls,
            "ns_per_call_plain": statistics.median(s["plain"] for s in samples[fn]),
            "ns_per_call_probed": statistics.median(s["probed"] for s in samples[fn]),
            "us_per_hit": round(ns / 1000.0, 3),
            "hits_per_second": round(1e9 / ns) if ns > 0 else None,
            "runs_us_per_hit": [round(s["ns_per_hit"] / 1000.0, 3) for s in samples[fn]],
        }
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(),
        "calls": calls,
        "repeat": repeat,
        "floor": {
            "program": "bench/harness/trap_floor.c",
            "hits": calls * 5,
            "us_per_hit": round(floor_ns / 1000.0, 3),
            "hits_per_second": round(1e9 / floor_ns),
            "runs_us_per_hit": [round(x / 1000.0, 3) for x in floor_runs],
        },
        "harness": harness,
        "ratio": {fn: round(v["us_per_hit"] * 1000.0 / floor_ns, 3) for fn, v in harness.items()},
        "goal": "<= 2.0 x the bare trap",
    }
    _write_bench(out_dir, result)
    return result


def _bench_out(run: Run, what: str) -> dict:
    if run.status != 0:
        raise UserError(f"bench: {what} failed with status {run.status}: {run.stderr.decode(errors='replace').strip()[:200]}")
    out = {}
    for word in run.stdout.decode(errors="replace").split():
        k, sep, v = word.partition("=")
        if sep:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def _write_bench(out_dir: Path, result: dict) -> None:
    f = result["floor"]
    md = [
        "# Harness benchmark: probe hits per second",
        "",
        f"Made by `generator.bench.harness.bench_harness()` (`invoke bench`) on {result['date']}, "
        f"{result['cpus']} CPUs; median of {result['repeat']} interleaved runs.",
        "",
        "The floor is `bench/harness/trap_floor.c`: int3 over one instruction, a SIGTRAP handler that",
        "checks `%rip`, counts and sets `%rip` to a trampoline that runs the instruction and jumps back.",
        "The harness rows probe every instruction of a function in `bench/harness/hot.c` with the",
        "generated core and the real audit library; cost per hit = (probed - plain loop time) / hits.",
        "",
        "| run | hits/call | us per hit | hits per second | x floor |",
        "|---|---|---|---|---|",
        f"| bare SIGTRAP + trampoline round trip (`trap_floor`) | 1 | {f['us_per_hit']:.3f} | {f['hits_per_second']:,.0f} | 1.00 |",
    ]
    for k, v in result["harness"].items():
        md.append(
            f"| harness, `{k}` ({v['what']}) | {v['hits_per_call']:.0f} | {v['us_per_hit']:.3f} | "
            f"{v['hits_per_second']:,.0f} | {result['ratio'][k]:.2f} |"
        )
    md += ["", f"Goal: {result['goal']}.", ""]
    write_all([(out_dir / "harness.json", json.dumps(result, indent=2) + "\n"), (out_dir / "harness.md", "\n".join(md))])
