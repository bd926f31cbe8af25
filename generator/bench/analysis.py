"""``invoke bench``: whole-image analysis against ``objdump -d``, image by image, in one run.

Both sides start cold, as separate processes on the same file, so each ratio
compares like with like on this machine at this moment:

- ours, summary: ``python -m generator probes --all --summary --json``, every
  instruction of every function decoded and classified, one line per function
  (the host library's walk: the portable core's rule on every instruction);
- ours, full: ``python -m generator probes --all --json``, every field of
  every instruction, with capstone's text (the decoder of record);
- capstone alone: ``python -m generator.bench.capfloor``, capstone's C
  ``cs_disasm`` over every function with nothing printed, the floor under
  any output that carries capstone's text (with the full JSON);
- objdump: ``objdump -d --no-show-raw-insn`` written to a file, instructions
  counted from its lines.

Ours uses one worker per core, objdump one: the ratio is given per wall
second and per CPU-second (user + system of the process and its workers).
Both, and each run's peak memory, come from GNU time (``_timed`` says why);
each run is the fastest of three (ten on a small image), taken in turns
(``bench_image`` says why).
Python's own start-up (``python -c pass``) and the CLI's imports are timed
too: on a small image they are most of the run, and a budget below them
(objdump's time over two) cannot be met by any Python command.

The images: the largest libLLVM (kernel-sized: ~50 MB of text, 3 M probes),
a Linux kernel with symbols when one is cached (``<cache>/bench/``, or
``--with-vmlinux`` fetches Debian's), and the programs a new user tries first
(qemu-system-x86_64, libstdc++).  Results go to ``bench/results/analysis.json``
and ``analysis.md``, which name the commands so a result can be reproduced.
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
from typing import Dict, List, Optional, Sequence, Tuple

from .. import isa as isa_registry
from ..common.errors import UserError
from ..common.files import write_all
from ..common.paths import CACHE
from ..image.elf import KernelImage
from ..image import open_image

_HOST = isa_registry.host().oracle
_LIBDIR = Path("/usr/lib", _HOST.gnu_triple)  # the host's libraries, where Debian installs them
_OBJDUMP_INSN = re.compile(rb"^ *[0-9a-f]+:\t", re.M)  # a kernel's 16-digit addresses have no indent
VMLINUX_DIR = CACHE / "bench"
# Debian's kernel with symbols for the host's ISA: a real kernel, ~2.7 M instructions in functions on amd64
VMLINUX_PACKAGE = f"linux-image-{_HOST.debian_arch}-dbg"
# What a new user tries first: QEMU for the host's own machine, and the C++ library.
EXTRA_IMAGES = (f"/usr/bin/qemu-system-{_HOST.gnu_triple.split('-')[0]}", str(_LIBDIR / "libstdc++.so.6"))


@dataclass(frozen=True)
class Run:
    """One timed child process."""

    command: str
    seconds: float
    cpu_seconds: float
    instructions: int
    insns_per_second: float
    insns_per_cpu_second: float
    peak_rss_mib: float


def default_image() -> str:
    """The largest libLLVM here: real code nobody here wrote, > 20 MB of text."""
    cands = sorted(_LIBDIR.glob("libLLVM-*.so.1"), key=lambda p: p.stat().st_size, reverse=True)
    if not cands:
        raise UserError("no libLLVM-*.so.1 found; pass --image PATH of an image with >= 20 MB of text")
    return str(cands[0])


def cached_vmlinux() -> Optional[str]:
    """A Linux vmlinux with symbols in the bench cache, if one was fetched."""
    found = sorted(VMLINUX_DIR.glob("usr/lib/debug/boot/vmlinux-*"))
    return str(found[-1]) if found else None


def fetch_vmlinux() -> str:
    """Download Debian's kernel debug package once and keep only its vmlinux (~600 MB)."""
    have = cached_vmlinux()
    if have:
        return have
    VMLINUX_DIR.mkdir(parents=True, exist_ok=True)
    dep = subprocess.run(["apt-cache", "depends", VMLINUX_PACKAGE], capture_output=True, text=True)
    names = [ln.split(":", 1)[1].strip() for ln in dep.stdout.splitlines() if ln.strip().startswith("Depends:")]
    if not names:
        raise UserError(f"apt-cache knows no dependency of {VMLINUX_PACKAGE}; run apt-get update first")
    with tempfile.TemporaryDirectory(dir=VMLINUX_DIR) as tmp:
        got = subprocess.run(["apt-get", "download", names[0]], cwd=tmp, capture_output=True, text=True)
        debs = list(Path(tmp).glob("*.deb"))
        if got.returncode != 0 or not debs:
            raise UserError(f"apt-get download {names[0]} failed: {(got.stderr or got.stdout).strip()[:200]}")
        # Extracted beside the cache entry and renamed into it: another session's cached_vmlinux() never sees
        # half a file.
        cmd = f"dpkg --fsys-tarfile {debs[0]} | tar -x -C {tmp} --wildcards './usr/lib/debug/boot/vmlinux-*'"
        if subprocess.run(cmd, shell=True).returncode != 0:
            raise UserError(f"could not extract the vmlinux from {debs[0].name}")
        debs[0].unlink()
        for got_file in Path(tmp).glob("usr/lib/debug/boot/vmlinux-*"):
            dest = VMLINUX_DIR / got_file.relative_to(tmp)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(got_file, dest)
    have = cached_vmlinux()
    if not have:
        raise UserError(f"{names[0]} holds no usr/lib/debug/boot/vmlinux-*")
    return have


def text_bytes(img: KernelImage) -> int:
    return sum(s.size for s in img.sections if s.executable and not s.nobits)


GNU_TIME = "/usr/bin/time"  # Debian's "time" package


def _bytecode_env(pycache: Optional[Path]) -> Dict[str, Optional[str]]:
    """Python's bytecode settings for a timed run: with ``pycache``, compiled modules are kept there (and
    PYTHONDONTWRITEBYTECODE is dropped), so that every round after the first runs on bytecode, as an installed
    tool does; each tree compared gets a folder of its own.  Without, the caller's environment decides, and
    a tree that happens to hold .pyc files runs on them while one without is compiled anew every run."""
    if pycache is None:
        return {}
    return {"PYTHONPYCACHEPREFIX": str(pycache), "PYTHONDONTWRITEBYTECODE": None}


def _timed(cmd: List[str], out_path: Path, env: Optional[Dict[str, str]] = None,
           cwd: Optional[str] = None, pycache: Optional[Path] = None) -> Tuple[float, float, float]:
    """(wall seconds, CPU seconds of the process and its reaped workers, peak RSS in MiB); ``pycache``: see
    ``_bytecode_env``.

    The peak comes from GNU time, not from wait4() here: Linux starts a
    child's ru_maxrss at the RSS of the process that forked it, so a child of
    this (large) bench process would report at least the bench's own size.
    GNU time is small, and what it reports is its child's."""
    usage_file = out_path.with_suffix(out_path.suffix + ".time")
    timed = [GNU_TIME, "-f", "%U %S %M", "-o", str(usage_file), *cmd] if os.path.exists(GNU_TIME) else cmd
    with open(out_path, "wb") as out:
        t0 = time.perf_counter()
        full = {**os.environ, "CI": "1", **(env or {}), **_bytecode_env(pycache)}
        proc = subprocess.Popen(timed, stdout=out, stderr=subprocess.PIPE, cwd=cwd,
                                env={k: v for k, v in full.items() if v is not None})
        _, status, usage = os.wait4(proc.pid, 0)
        secs = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise UserError(f"{cmd[0]} failed ({proc.returncode}): {err.strip().splitlines()[-1] if err.strip() else ''}")
    if timed is cmd:
        return secs, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0
    user, system, kib = usage_file.read_text().split()[-3:]
    return secs, float(user) + float(system), int(kib) / 1024.0


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
            # Only a line's start is matched, and every chunk is completed
            # to the end of its last line.
            rest = f.readline()
            n += len(_OBJDUMP_INSN.findall(chunk + rest))
    return n


def _run(name: str, cmd: List[str], out: Path, count, env: Optional[Dict[str, str]] = None,
         cwd: Optional[str] = None, pycache: Optional[Path] = None) -> Run:
    secs, cpu, rss = _timed(cmd, out, env, cwd, pycache)
    n = count(out)
    shown = ("python " + " ".join(cmd[1:])) if cmd[0] == sys.executable else " ".join(cmd)
    if env:
        shown = " ".join(f"{k}={v}" for k, v in env.items()) + " " + shown
    return Run(shown, round(secs, 3), round(cpu, 3), n, n / secs, n / max(cpu, 1e-9), round(rss, 1))


ROUNDS = 3  # every run is repeated, the kinds taking turns, and the fastest of each kept
# Against a tree before (``--before``), more: the first round compiles each tree's bytecode, and the two
# trees are within a few percent of each other, less than one round's drift on this machine.
BEFORE_ROUNDS = 5
# An image of less text than this has its runs repeated SMALL_ROUNDS times: they take a
# fraction of a second, where a drift of the machine's speed is a large part of the time.
SMALL_TEXT, SMALL_ROUNDS = 2 << 20, 10


def before_tree(tree: str) -> str:
    """``tree`` (another kinstkit source tree, e.g. ``git archive`` of an older commit), checked to be what
    ``python -m generator`` imports with it on PYTHONPATH from a folder of its own (``bench_image``'s
    "before" runs); its absolute path."""
    root = os.path.abspath(tree)
    with tempfile.TemporaryDirectory() as tmp:
        got = subprocess.run([sys.executable, "-c", "import generator; print(generator.__file__)"], cwd=tmp,
                             env={**os.environ, "PYTHONPATH": root}, capture_output=True, text=True)
    if got.returncode != 0 or not got.stdout.strip().startswith(root + os.sep):
        said = got.stdout.strip() or (got.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"--before {tree}: python does not import generator from there ({said}); give a kinstkit "
                        "source tree (git archive REV | tar -x -C DIR)")
    return root


def bench_image(path: str, full: bool = True, rounds: Optional[int] = None,
                before: Optional[str] = None) -> Dict[str, object]:
    """Ours (summary, and full JSON when ``full``) and objdump on one image, the best of ``rounds`` each
    (``ROUNDS``, ``BEFORE_ROUNDS`` with ``before``, or ``SMALL_ROUNDS`` for an image of less than
    ``SMALL_TEXT``); with ``before`` (a tree
    ``before_tree`` checked), that tree's summary and full JSON too, in the same turns.

    This machine's speed drifts by a third within minutes (it shares its
    host), so one run of each, minutes apart, can set a slow objdump against
    a fast run of ours or the reverse.  Taking turns and keeping each kind's
    fastest run compares them at the machine's best.
    """
    img = open_image(path)
    if rounds is None:
        rounds = SMALL_ROUNDS if text_bytes(img) < SMALL_TEXT else BEFORE_ROUNDS if before else ROUNDS
    base = [sys.executable, "-m", "generator", "probes", "--kernel", path, "--all", "--json"]
    plan: List[Tuple[str, List[str], object, Optional[Dict[str, str]]]] = [
        ("ours", base + ["--summary"], _count_ours, None),
    ]
    if before:
        plan.append(("before", base + ["--summary"], _count_ours, {"PYTHONPATH": before}))
    if full:
        plan += [("ours_full", base, _count_ours, None),
                 ("capstone", [sys.executable, "-m", "generator.bench.capfloor", path], lambda p: int(p.read_text()),
                  None)]
        if before:
            plan.append(("before_full", base, _count_ours, {"PYTHONPATH": before}))
    plan.append(("objdump", ["objdump", "-d", "--no-show-raw-insn", path], _count_objdump, None))
    runs: Dict[str, Run] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for name, cmd, count, env in plan:
                # The tree before runs from a folder of its own: the working folder comes first on sys.path.
                # Each tree's bytecode is kept in a folder of its own (its first round compiles it).
                pycache = Path(tmp, "pyc-before" if env else "pyc-ours") if cmd[0] == sys.executable else None
                run = _run(name, cmd, Path(tmp, f"{name}.out"), count, env, tmp if env else None, pycache)
                if name not in runs or run.seconds < runs[name].seconds:
                    runs[name] = run
    od = runs["objdump"]
    out: Dict[str, object] = {
        "image": path,
        "image_sha256": img.sha256(),
        "text_mib": round(text_bytes(img) / 2**20, 1),
        "functions": len(img.functions()),
        "rounds": rounds,
        "runs": {k: asdict(v) for k, v in runs.items()},
        # The wall time the summary may take to reach 2x objdump's rate.
        "budget_2x_seconds": round(runs["ours"].instructions / (2 * od.insns_per_second), 3),
    }
    for k, v in runs.items():
        if k != "objdump":
            out[f"ratio_{k}"] = round(v.insns_per_second / od.insns_per_second, 3)
            out[f"ratio_{k}_per_cpu"] = round(v.insns_per_cpu_second / od.insns_per_cpu_second, 3)
    return out


def bench_generate(path: str, work: Path) -> Dict[str, object]:
    """``generate --all`` on ``path`` and the table compiled as a module build compiles it."""
    from ..kmod.kmodflags import portable_cflags
    from ..kmod.sources import source_dir
    from ..providers import PROVIDERS

    out_dir = work / "kinst"
    gen = [sys.executable, "-m", "generator", "generate", "--kernel", path, "--all", "--out", str(out_dir)]
    secs, cpu, rss = _timed(gen, work / "generate.out")
    line = (work / "generate.out").read_text().splitlines()[0]
    probes = int(line.split()[0])
    provider = PROVIDERS["kinst"]
    isa = open_image(path).isa
    for rel in provider.plain():  # the machine-independent files and the image's ISA's, side by side
        if str(Path(rel).parent) in provider.includes(isa.name):
            (out_dir / Path(rel).name).write_bytes((source_dir(provider) / rel).read_bytes())
    cc = ["clang", *portable_cflags("clang", isa), "-I", str(out_dir), "-c", str(out_dir / "kinst_table.c"),
          "-o", str(work / "kinst_table.o")]
    csecs, ccpu, crss = _timed(cc, work / "cc.out")
    size = subprocess.run(["size", "-A", str(work / "kinst_table.o")], capture_output=True, text=True).stdout
    alloc = sum(int(w[1]) for w in (ln.split() for ln in size.splitlines())
                if len(w) >= 2 and w[0].startswith((".rodata", ".data")) and w[1].isdigit())
    return {
        "image": path,
        "command": "python " + " ".join(gen[1:]),
        "seconds": round(secs, 3),
        "cpu_seconds": round(cpu, 3),
        "peak_rss_mib": round(rss, 1),
        "probes": probes,
        "table_c_bytes": (out_dir / "kinst_table.c").stat().st_size,
        "compile_command": " ".join(cc[:2]) + " <kernel flags> -c kinst_table.c",
        "compile_seconds": round(csecs, 3),
        "compile_peak_rss_mib": round(crss, 1),
        "table_bytes_in_module": alloc,
        "bytes_per_probe": round(alloc / max(probes, 1), 3),
    }


def bench_startup() -> Dict[str, float]:
    """Seconds before any work: the interpreter alone, and the interpreter importing the summary's modules."""
    imports = ("import generator.cli, generator.analysis.whole, generator.analysis.summary, generator.isa, "
               "generator.isa.hostcore; generator.isa.host()")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, code in (("python", "pass"), ("python_and_imports", imports)):
            best = min(_timed([sys.executable, "-c", code], Path(tmp, "out"), pycache=Path(tmp, "pyc"))[0]
                       for _ in range(5))
            out[name] = round(best, 3)
    return out


def bench_analysis(image: Optional[str], out_dir: Path, extra: Sequence[str] = EXTRA_IMAGES,
                   with_vmlinux: bool = False, before: Optional[str] = None) -> dict:
    """The analysis benchmark into ``out_dir``; with ``before``, another tree's summary and full JSON beside
    ours on every image."""
    before = before_tree(before) if before else None
    path = image or default_image()
    img = open_image(path)
    text = text_bytes(img)
    if text < 20 * 2**20:
        raise UserError(f"{path}: only {text / 2**20:.1f} MiB of text; the benchmark wants >= 20 MiB")
    images = [bench_image(path, before=before)]
    vmlinux = fetch_vmlinux() if with_vmlinux else cached_vmlinux()
    if vmlinux:
        images.append(bench_image(vmlinux, before=before))
    images += [bench_image(p, full=False, before=before) for p in extra if os.path.exists(p)]
    with tempfile.TemporaryDirectory() as tmp:
        generate = bench_generate(path, Path(tmp))
    result = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "images": images,
        "startup_seconds": bench_startup(),
        "vmlinux": vmlinux or "not measured: no kernel image cached (invoke bench --with-vmlinux fetches one)",
        "before": before,
        "generate": generate,
        "goals": {
            "summary": ">= 2.0 x objdump's instructions per second on every large image",
            "full_json": ">= 1.0 x objdump's instructions per second",
            "generate": "<= 30 s and <= 1.5 GB on libLLVM-15; compile <= 30 s and <= 1 GB; <= 4 bytes per probe",
        },
    }
    _write(out_dir, result)
    return result


def _write(out_dir: Path, result: dict) -> None:
    md = [
        "# Whole-image analysis benchmark",
        "",
        f"Made by `python3 -m invoke bench` (`python -m generator bench`) on {result['date']}, "
        f"{result['cpus']} CPUs, Python {result['python']}.  Ours uses one worker per CPU, objdump one, so each ratio "
        f"to objdump is given per wall second and per CPU-second.  Each figure is the fastest of "
        f"{BEFORE_ROUNDS if result.get('before') else ROUNDS} runs "
        f"({SMALL_ROUNDS} for an image of less than {SMALL_TEXT >> 20} MiB of text), the commands taking turns: this "
        "machine's speed drifts within minutes.",
        "",
        "| image | text MiB | run | seconds | CPU s | instructions | insns/s | peak RSS MiB | x objdump (wall) | x objdump (CPU) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for im in result["images"]:
        for k, r in im["runs"].items():
            ratio = f"{im['ratio_' + k]:.2f}" if k != "objdump" else "1"
            rcpu = f"{im['ratio_' + k + '_per_cpu']:.2f}" if k != "objdump" else "1"
            label = {"ours": "ours, summary", "before": "before, summary",
                     "ours_full": "ours, full JSON", "before_full": "before, full JSON",
                     "capstone": "capstone cs_disasm alone, no output", "objdump": "objdump -d"}[k]
            md.append(f"| `{Path(im['image']).name}` | {im['text_mib']} | {label} | {r['seconds']:.2f} | "
                      f"{r['cpu_seconds']:.2f} | {r['instructions']} | {r['insns_per_second']:,.0f} | "
                      f"{r['peak_rss_mib']:.0f} | {ratio} | {rcpu} |")
    g = result["generate"]
    st = result["startup_seconds"]
    md += [
        "",
        f"Start-up, best of five: `python -c pass` {st['python']:.3f} s; with the summary's imports "
        f"{st['python_and_imports']:.3f} s.  The summary's wall-time budget at 2x objdump's rate: "
        + "; ".join(f"`{Path(im['image']).name}` {im['budget_2x_seconds']:.3f} s" for im in result["images"]) + ".",
        "",
        f"Kernel image: {result['vmlinux']}.",
        "",
        *([f"Before: the kinstkit tree at {result['before']} (`--before`), its `python -m generator` run with "
           "PYTHONPATH set to it from a folder of its own, in the same turns as ours.  Each tree's Python "
           "bytecode is kept in a folder of its own (PYTHONPYCACHEPREFIX), so that after the first round both run "
           "on bytecode, as an installed tool does.", ""]
          if result.get("before") else []),
        "Commands: " + "; ".join(f"`{r['command']}`" for r in result["images"][0]["runs"].values()) + ".",
        "",
        "## Generating a whole image's kinst table",
        "",
        f"`{g['command']}`: {g['probes']:,} probes in {g['seconds']:.1f} s ({g['cpu_seconds']:.1f} CPU s), "
        f"peak RSS {g['peak_rss_mib']:.0f} MiB; `kinst_table.c` is {g['table_c_bytes'] / 2**20:.1f} MiB.",
        f"`{g['compile_command']}`: {g['compile_seconds']:.2f} s, peak RSS {g['compile_peak_rss_mib']:.0f} MiB; "
        f"the table is {g['table_bytes_in_module']:,} bytes in the module: **{g['bytes_per_probe']:.2f} bytes per "
        "probe**.",
        "",
        "Goals: " + "; ".join(f"{k}: {v}" for k, v in result["goals"].items()) + ".",
        "",
    ]
    write_all([(out_dir / "analysis.json", json.dumps(result, indent=2) + "\n"), (out_dir / "analysis.md", "\n".join(md))])
