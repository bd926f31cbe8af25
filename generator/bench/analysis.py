"""``invoke bench``: whole-image analysis against ``objdump -d``, in one run.

Both sides start cold, as separate processes on the same file, so the ratio
compares like with like on this machine at this moment:

- ours, summary: ``python -m generator probes --all --summary --json``, every
  instruction of every function decoded and classified, one line per function
  (the accelerated path, held equal to the capstone path by the tests);
- ours, full: ``python -m generator probes --all --json``, every field of
  every instruction through capstone, the decoder of record;
- objdump: ``objdump -d --no-show-raw-insn`` written to a file, instructions
  counted from its lines.

Peak memory is each child's ``ru_maxrss`` from ``wait4``.  Results go to
``bench/results/analysis.json`` and a short ``analysis.md`` that names the
command, so a committed result can be reproduced.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional

from generator.common.errors import UserError
from generator.image.elf import KernelImage
from generator.common.files import write_all

MIN_TEXT = 20 * 1024 * 1024
_LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
_OBJDUMP_INSN = re.compile(rb"^ +[0-9a-f]+:\t", re.M)


@dataclass(frozen=True)
class Run:
    """One timed child process."""

    command: str
    seconds: float
    instructions: int
    insns_per_second: float
    peak_rss_mib: float


def default_image() -> str:
    """The largest libLLVM here: real code nobody here wrote, > 20 MB of text."""
    cands = sorted(_LIBDIR.glob("libLLVM-*.so.1"), key=lambda p: p.stat().st_size, reverse=True)
    if not cands:
        raise UserError("no libLLVM-*.so.1 found; pass --image PATH of an image with >= 20 MB of text")
    return str(cands[0])


def text_bytes(img: KernelImage) -> int:
    return sum(s.size for s in img.sections if s.executable and not s.nobits)


def _timed(cmd: List[str], out_path: Path) -> tuple:
    with open(out_path, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env={**os.environ, "CI": "1"})
        _, status, usage = os.wait4(proc.pid, 0)
        secs = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise UserError(f"{cmd[0]} failed ({proc.returncode}): {err.strip().splitlines()[-1] if err.strip() else ''}")
    return secs, usage.ru_maxrss / 1024.0


def _count_ours(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        for line in f:
            rec = json.loads(line)
            n += rec["instructions"] if "instructions" in rec else len(rec["probes"])
    return n


def _count_objdump(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 24)
            if not chunk:
                break
            # Lines never straddle a read in a way that matters: only the
            # line start is matched and chunks end on a newline below.
            rest = f.readline()
            n += len(_OBJDUMP_INSN.findall(chunk + rest))
    return n


def bench_analysis(image: Optional[str], out_dir: Path) -> dict:
    path = image or default_image()
    img = KernelImage.open(path)
    text = text_bytes(img)
    if text < MIN_TEXT:
        raise UserError(f"{path}: only {text / 2**20:.1f} MiB of text; the benchmark wants >= 20 MiB")
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = [sys.executable, "-m", "generator", "probes", "--kernel", path, "--all", "--json"]
        for name, cmd in (("ours", base + ["--summary"]), ("ours_full", base)):
            secs, rss = _timed(cmd, Path(tmp, f"{name}.jsonl"))
            n = _count_ours(Path(tmp, f"{name}.jsonl"))
            runs[name] = Run("python " + " ".join(cmd[1:]), secs, n, n / secs, rss)
        od_cmd = ["objdump", "-d", "--no-show-raw-insn", path]
        secs, rss = _timed(od_cmd, Path(tmp, "objdump.txt"))
        n = _count_objdump(Path(tmp, "objdump.txt"))
        runs["objdump"] = Run(" ".join(od_cmd), secs, n, n / secs, rss)
    result = {
        "image": path,
        "image_sha256": img.sha256(),
        "text_mib": round(text / 2**20, 1),
        "functions": len(img.functions()),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "runs": {k: asdict(v) for k, v in runs.items()},
        "ratio_ours_over_objdump": round(runs["ours"].insns_per_second / runs["objdump"].insns_per_second, 3),
        "ratio_full_over_objdump": round(runs["ours_full"].insns_per_second / runs["objdump"].insns_per_second, 3),
        "goal": ">= 2.0",
    }
    _write(out_dir, result)
    return result


def _write(out_dir: Path, result: dict) -> None:
    o, f, d = result["runs"]["ours"], result["runs"]["ours_full"], result["runs"]["objdump"]
    md = [
        "# Whole-image analysis benchmark",
        "",
        "Made by `python3 -m invoke bench` (`python -m generator bench`) on " + result["date"] + ".",
        "",
        f"Image: `{result['image']}` ({result['text_mib']} MiB of executable sections, "
        f"{result['functions']} function symbols), {result['cpus']} CPUs, Python {result['python']}.",
        "",
        "| run | seconds | instructions | insns/s | peak RSS (MiB) |",
        "|---|---|---|---|---|",
        f"| ours, summary: `{o['command']}` | {o['seconds']:.2f} | {o['instructions']} | {o['insns_per_second']:,.0f} | {o['peak_rss_mib']:.0f} |",
        f"| ours, full: `{f['command']}` | {f['seconds']:.2f} | {f['instructions']} | {f['insns_per_second']:,.0f} | {f['peak_rss_mib']:.0f} |",
        f"| objdump: `{d['command']}` | {d['seconds']:.2f} | {d['instructions']} | {d['insns_per_second']:,.0f} | {d['peak_rss_mib']:.0f} |",
        "",
        f"Ratio (ours, summary / objdump, instructions per second): **{result['ratio_ours_over_objdump']}**; "
        f"goal {result['goal']}. Full per-instruction JSON through capstone: "
        f"{result['ratio_full_over_objdump']} of objdump's rate.",
        "",
    ]
    write_all([(out_dir / "analysis.json", json.dumps(result, indent=2) + "\n"), (out_dir / "analysis.md", "\n".join(md))])
