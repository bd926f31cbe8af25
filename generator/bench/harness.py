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
from ..run.harness import BUILD_DIR, Build, build, gcc
from ..run.process import Run, run_command


BENCH_SRC = REPO / "bench" / "harness"  # the floor and the hot loop, in C
JUMP_FN = "hot_jump"  # hot.c's function whose every hit is a jump hit under --jump


def bench_harness(out_dir: Path = BENCH_RESULTS, calls: int = 100_000, repeat: int = 3) -> dict:
    """Hits per second of the harness against a bare SIGTRAP + trampoline round trip.

    Both are measured in this call, on this machine, interleaved ``repeat``
    times (the median is reported): ``bench/harness/trap_floor.c`` is the
    floor (int3 over one instruction; a handler that checks %rip, counts and
    sets %rip to a trampoline; nothing else).  The harness side probes every
    instruction of a function of ``bench/harness/hot.c`` with the generated
    core and the real audit library, and ``hot_main`` times the same loop
    plain and probed; cost per hit = (probed - plain) / hits.  The jump rows
    (issue 22) time ``hot_jump``, whose five hits are all jump hits under
    ``harness --jump``, three ways in the same round: plain, every probe a
    breakpoint, every probe fired by a detour; the handler does the same work
    (count the hit, call ``kh_hit()``).  Results go to ``harness.json`` and
    ``harness.md`` in ``out_dir``.
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
    jump_builds = {"breakpoint": build(lib, [JUMP_FN]), "jump": build(lib, [JUMP_FN], jump=True)}
    if jump_builds["jump"].jump.jumped != len(jump_builds["jump"].probes):
        raise UserError(f"bench: {JUMP_FN}'s probes are not all jump probes under --jump: {jump_builds['jump'].jump}")
    floor_runs: List[float] = []
    samples: Dict[str, List[dict]] = {fn: [] for fn, _ in functions}
    jump_samples: Dict[str, List[dict]] = {k: [] for k in jump_builds}
    for _ in range(repeat):
        hits_per_call = 5
        f = _bench_out(run_command([str(work / "trap_floor"), str(calls * hits_per_call)], dict(os.environ)),
                       "trap_floor")
        floor_runs.append(f["ns_per_hit"])
        for fn, _ in functions:
            samples[fn].append(_sample(work, fn, [builds[fn]], calls)[0])
        for k, s in zip(jump_builds, _sample(work, JUMP_FN, list(jump_builds.values()), calls)):
            jump_samples[k].append(s)
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
        "jump": _jump_result(jump_samples, floor_ns, calls),
    }
    _write_bench(out_dir, result)
    return result


def _sample(work: Path, fn: str, builds: List[Build], calls: int) -> List[dict]:
    """One plain run of ``fn`` and one probed run per build: each build's cost per hit against that plain run."""
    plain = _bench_out(run_command([str(work / "hot_main"), fn, str(calls)], dict(os.environ)), "hot_main")
    out = []
    for b in builds:
        with tempfile.TemporaryDirectory(prefix="kinst-bench-") as tmp:
            prefix = Path(tmp) / "hits"
            r = run_command([str(work / "hot_main"), fn, str(calls)], audit_env(b.lib, prefix, "probe"))
            probed = _bench_out(r, "hot_main " + fn + " (probed)")
            hits = sum(read_hits(prefix, len(b.probes))[0])
        if probed.get("sum") != plain.get("sum"):
            raise UserError(f"bench: {fn} computed a different result under the harness")
        out.append({
            "plain": plain["ns_per_call"], "probed": probed["ns_per_call"], "hits": hits,
            "ns_per_hit": (probed["ns_per_call"] - plain["ns_per_call"]) * calls / max(hits, 1),
        })
    return out


def _jump_result(samples: Dict[str, List[dict]], floor_ns: float, calls: int) -> dict:
    """The jump rows: ``hot_jump``'s cost per hit as breakpoints and as jumps, medians, and their ratios."""
    ns = {k: statistics.median(s["ns_per_hit"] for s in v) for k, v in samples.items()}
    rows = {k: {"hits": v[0]["hits"], "hits_per_call": v[0]["hits"] / calls,
                "ns_per_call_plain": statistics.median(s["plain"] for s in v),
                "ns_per_call_probed": statistics.median(s["probed"] for s in v),
                "us_per_hit": round(ns[k] / 1000.0, 4), "hits_per_second": round(1e9 / ns[k]) if ns[k] > 0 else None,
                "runs_us_per_hit": [round(s["ns_per_hit"] / 1000.0, 4) for s in v]} for k, v in samples.items()}
    return {"function": JUMP_FN, "runs": rows,
            "jump_over_breakpoint": round(ns["jump"] / ns["breakpoint"], 4) if ns["breakpoint"] > 0 else None,
            "jump_over_floor": round(ns["jump"] / floor_ns, 4), "goal": "jump <= 0.1 x a breakpoint hit"}


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
    j = result["jump"]
    md += [
        f"## Jump probes (issue 22): `{j['function']}`, the same five hits, same run",
        "",
        "`hot_jump` is `hot_lea` with a nop after its `ret`, so that under `harness --jump` two detours fire",
        "all five probes; without `--jump` the same five are breakpoints.  Both handlers count the hit and",
        "call `kh_hit()`; the jump's detour also saves and restores every register and the x87/SSE state.",
        "",
        "| run | hits/call | us per hit | hits per second | x breakpoint | x floor |",
        "|---|---|---|---|---|---|",
    ]
    for k, v in j["runs"].items():
        over = v["us_per_hit"] / j["runs"]["breakpoint"]["us_per_hit"] if j["runs"]["breakpoint"]["us_per_hit"] else 0
        md.append(f"| {k} (`harness{' --jump' if k == 'jump' else ''}`) | {v['hits_per_call']:.0f} | "
                  f"{v['us_per_hit']:.4f} | {v['hits_per_second']:,.0f} | {over:.3f} | "
                  f"{v['us_per_hit'] / f['us_per_hit']:.3f} |")
    md += ["", f"Goal: {j['goal']}.", ""]
    write_all([(out_dir / "harness.json", json.dumps(result, indent=2) + "\n"), (out_dir / "harness.md", "\n".join(md))])
