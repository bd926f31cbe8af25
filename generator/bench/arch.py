"""``invoke bench`` on arm64 and riscv64: analysis against the cross objdump, harness hits against a bare trap.

For each foreign ISA, in one run:

- analysis of a large library: Debian's ``libLLVM-15.so.1`` of the ISA
  (``bigimage.py``: tens of megabytes of text, a kernel's size), else the
  largest shared object of the ISA's cross C library root, cold, as
  separate processes: ``probes --all --summary --json`` (the host walk
  around the ISA's portable core, ``isa/hostcore.py``) against the ISA's
  cross objdump (``aarch64-linux-gnu-objdump -d``), instructions per second
  each, the faster of two turns each;
- analysis of the cross C library's largest shared object: the summary,
  ``probes --all --json`` (every instruction's record; on the large library
  it would write gigabytes) and the cross objdump;
- harness: under the ISA's qemu-user, the cost of a probe hit against the
  bare breakpoint round trips of ``bench/harness/trap_floor_dbp.c`` measured
  in the same run: one trap (the shape of an emulated hit) and two (a
  trampolined hit), with every instruction of the functions of
  ``bench/harness/hot_dbp.c`` probed through the real audit library.

Results go to ``bench/results/arch.json`` and ``arch.md``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List

from .. import isa as isa_registry
from . import bigimage
from .analysis import Run, _count_objdump, _count_ours, _run, text_bytes
from ..common.errors import UserError
from ..common.files import write_all
from ..common.paths import BENCH_RESULTS, REPO
from ..run import qemu
from ..run.audit import audit_env, read_hits
from ..run.harness import BUILD_DIR, build, gcc
from ..run.process import run_command
from ..image import open_image

# The ISAs whose programs run under qemu-user here: the host's own is benched by ``bench.analysis``.
ARCHES = tuple(name for name in isa_registry.SUPPORTED if isa_registry.by_name(name).oracle.qemu)
BENCH_SRC = REPO / "bench" / "harness"


def largest_image(arch: str) -> str:
    """The largest ELF shared object under the ISA's cross C library root."""
    quirks = isa_registry.by_name(arch).oracle
    cands = [p for p in Path(quirks.sysroot, "lib").glob("*.so*") if p.is_file() and not p.is_symlink()]
    cands = [p for p in cands if p.read_bytes()[:4] == b"\x7fELF"]
    if not cands:
        raise UserError(f"no {arch} shared objects under {quirks.sysroot}/lib (apt-get install {quirks.cross_packages})")
    return str(max(cands, key=lambda p: p.stat().st_size))


def bench_analysis_arch(arch: str) -> dict:
    path = largest_image(arch)
    img = open_image(path)
    objdump = isa_registry.by_name(arch).oracle.objdump
    runs: Dict[str, Run] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = [sys.executable, "-m", "generator", "probes", "--kernel", path, "--all", "--json"]
        for name, cmd in (("ours", base + ["--summary"]), ("ours_full", base)):
            runs[name] = _run(name, cmd, Path(tmp, f"{name}.jsonl"), _count_ours)
        od = [objdump, "-d", "--no-show-raw-insn", path]
        runs["objdump"] = _run("objdump", od, Path(tmp, "objdump.txt"), _count_objdump)
    return {
        "image": path, "image_sha256": img.sha256(), "text_mib": round(text_bytes(img) / 2**20, 2),
        "functions": len(img.functions()), "runs": {k: asdict(v) for k, v in runs.items()},
        "ratio_ours_over_objdump": round(runs["ours"].insns_per_second / runs["objdump"].insns_per_second, 3),
        "ratio_full_over_objdump": round(runs["ours_full"].insns_per_second / runs["objdump"].insns_per_second, 3),
    }


def bench_large_arch(arch: str, rounds: int = 2) -> dict:
    """The summary of the ISA's large library against the cross objdump, the faster of ``rounds`` turns each."""
    isa = isa_registry.by_name(arch)
    big = bigimage.library(isa)
    path = str(big) if big is not None else largest_image(arch)
    img = open_image(path)
    plan = (("ours", [sys.executable, "-m", "generator", "probes", "--kernel", path, "--all", "--json", "--summary"],
             _count_ours),
            ("objdump", [isa.oracle.objdump, "-d", "--no-show-raw-insn", path], _count_objdump))
    runs: Dict[str, Run] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for name, cmd, count in plan:
                run = _run(name, cmd, Path(tmp, f"{name}.out"), count)
                if name not in runs or run.seconds < runs[name].seconds:
                    runs[name] = run
    why = "" if big is not None else (
        f"apt offers no {bigimage.PACKAGE}:{isa.oracle.debian_arch} here (`dpkg --add-architecture "
        f"{isa.oracle.debian_arch}; apt-get update` where the archive builds it), so the cross C library's largest")
    return {
        "image": path, "image_sha256": img.sha256(), "text_mib": round(text_bytes(img) / 2**20, 2),
        "functions": len(img.functions()), "rounds": rounds, "runs": {k: asdict(v) for k, v in runs.items()},
        "ratio_ours_over_objdump": round(runs["ours"].insns_per_second / runs["objdump"].insns_per_second, 3),
        "fallback": why,
    }


def _out(run, what: str) -> dict:
    if run.status != 0:
        raise UserError(f"bench: {what} failed with status {run.status}: "
                        f"{run.stderr.decode(errors='replace').strip()[:200]}")
    return {k: float(v) if v.replace(".", "", 1).isdigit() else v
            for k, _, v in (w.partition("=") for w in run.stdout.decode().split()) if v}


def bench_harness_arch(arch: str, calls: int = 20_000, repeat: int = 3) -> dict:
    quirks = isa_registry.by_name(arch).oracle
    cc = gcc(arch)
    work = BUILD_DIR / f"bench-{arch}"
    work.mkdir(parents=True, exist_ok=True)
    flags = ["-O2", "-fno-omit-frame-pointer", "-Wall", "-Werror"]
    for cmd in ([cc, *flags, "-o", str(work / "trap_floor_dbp"), str(BENCH_SRC / "trap_floor_dbp.c")],
                [cc, *flags, "-fPIC", "-shared", "-o", str(work / "libhot.so"), str(BENCH_SRC / "hot_dbp.c")],
                [cc, *flags, "-o", str(work / "hot_main"), str(BENCH_SRC / "hot_main.c"), f"-L{work}", "-lhot",
                 f"-Wl,-rpath,{work}"]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise UserError(f"bench build failed: {Path(cmd[-1]).name}: {proc.stderr.strip()[:200]}")
    lib = str(work / "libhot.so")
    fns = {"hot_lea": "trampolined instructions, an emulated ret", "hot_call": "with an emulated call"}
    builds = {fn: build(lib, [fn]) for fn in fns}
    floors: Dict[str, List[float]] = {"single": [], "double": []}
    samples: Dict[str, List[dict]] = {fn: [] for fn in fns}
    for _ in range(repeat):
        for shape in floors:
            r = run_command(qemu.wrap(quirks, [str(work / "trap_floor_dbp"), shape, str(calls)]), dict(os.environ))
            floors[shape].append(_out(r, f"trap_floor_dbp {shape}")["ns_per_hit"])
        for fn in fns:
            cmd = qemu.wrap(quirks, [str(work / "hot_main"), fn, str(calls)])
            plain = _out(run_command(cmd, dict(os.environ)), "hot_main")
            with tempfile.TemporaryDirectory(prefix="kinst-bench-") as tmp:
                prefix = Path(tmp) / "hits"
                probed = _out(run_command(cmd, audit_env(builds[fn].lib, prefix, "probe")), f"hot_main {fn}")
                hits = sum(read_hits(prefix, len(builds[fn].probes))[0])
            if probed.get("sum") != plain.get("sum") or hits == 0:
                raise UserError(f"bench: {fn} computed a different result under the harness, or was not hit")
            samples[fn].append({"hits": hits, "ns_per_hit": (probed["ns_per_call"] - plain["ns_per_call"])
                                * calls / hits})
    floor = {k: statistics.median(v) for k, v in floors.items()}
    harness = {}
    for fn, what in fns.items():
        ns = statistics.median(s["ns_per_hit"] for s in samples[fn])
        harness[fn] = {"what": what, "probes": len(builds[fn].probes), "hits_per_call": samples[fn][0]["hits"] / calls,
                       "us_per_hit": round(ns / 1000, 3), "x_single_trap": round(ns / floor["single"], 2),
                       "x_double_trap": round(ns / floor["double"], 2),
                       "runs_us_per_hit": [round(s["ns_per_hit"] / 1000, 3) for s in samples[fn]]}
    return {"emulator": qemu.emulator(quirks), "calls": calls, "repeat": repeat,
            "floor_us_per_hit": {k: round(v / 1000, 3) for k, v in floor.items()},
            "floor_runs_us": {k: [round(x / 1000, 3) for x in v] for k, v in floors.items()}, "harness": harness}


def bench_arch(out_dir: Path = BENCH_RESULTS) -> dict:
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": os.cpu_count(), "arches": {}}
    for arch in ARCHES:
        result["arches"][arch] = {"large": bench_large_arch(arch), "analysis": bench_analysis_arch(arch),
                                  "harness": bench_harness_arch(arch)}
    _write(Path(out_dir), result)
    return result


def _runs_table(a: dict, names) -> List[str]:
    rows = ["| run | seconds | CPU seconds | instructions | insns/s | peak RSS (MiB) |", "|---|---|---|---|---|---|"]
    for k in names:
        x = a["runs"][k]
        rows.append(f"| `{x['command']}` | {x['seconds']:.2f} | {x['cpu_seconds']:.2f} | {x['instructions']} | "
                    f"{x['insns_per_second']:,.0f} | {x['peak_rss_mib']:.0f} |")
    return rows


def _write(out_dir: Path, result: dict) -> None:
    md = [f"# {' and '.join(ARCHES)}: analysis against the cross objdump, harness hits against a bare trap", "",
          f"Made by `python3 -m invoke bench` (`generator.bench.arch`) on {result['date']}, {result['cpus']} CPUs.", ""]
    for arch, r in result["arches"].items():
        g, a, h = r["large"], r["analysis"], r["harness"]
        md += [f"## {arch}", "",
               f"Summary of `{g['image']}` ({g['text_mib']} MiB of text, {g['functions']} functions) by the host "
               f"walk around the portable core, the faster of {g['rounds']} turns each"
               + (f" ({g['fallback']})" if g.get("fallback") else "") + ":", "",
               *_runs_table(g, ("ours", "objdump")),
               "", f"Ours over objdump (instructions per second): summary {g['ratio_ours_over_objdump']}.", "",
               f"Analysis of `{a['image']}` ({a['text_mib']} MiB of text, {a['functions']} functions), one run each:",
               "", *_runs_table(a, ("ours", "ours_full", "objdump")),
               "", f"Ours over objdump (instructions per second): summary {a['ratio_ours_over_objdump']}, "
               f"full JSON {a['ratio_full_over_objdump']}.", "",
               f"Harness under `{h['emulator']}`, median of {h['repeat']} runs of {h['calls']} calls: the floor is "
               f"{h['floor_us_per_hit']['single']} us for one bare trap round trip and "
               f"{h['floor_us_per_hit']['double']} us for two (`bench/harness/trap_floor_dbp.c`).", "",
               "| function | probes | hits/call | us per hit | x one trap | x two traps |", "|---|---|---|---|---|---|"]
        for fn, v in h["harness"].items():
            md.append(f"| `{fn}` ({v['what']}) | {v['probes']} | {v['hits_per_call']:.0f} | {v['us_per_hit']} | "
                      f"{v['x_single_trap']} | {v['x_double_trap']} |")
        md.append("")
    write_all([(out_dir / "arch.json", json.dumps(result, indent=2) + "\n"), (out_dir / "arch.md", "\n".join(md))])
