"""``invoke bench``: the line and inline index -- built once, then queried -- against LLVM in the same run.

On the largest image with DWARF the tests build (the Lua 5.4 images from
its Debian source package, ``bench.debsrc``; or ``--dwarf-image``):

- index build: reading the DWARF into the index and caching it, cold (a
  fresh cache directory), in a child process, against ``llvm-dwarfdump
  --debug-info --debug-line`` reading the same DWARF;
- query: ``python -m generator probes --line`` and ``--inline`` as a user
  runs them, with the index cached (whole process: start, load, analyse,
  print), against ``llvm-symbolizer --inlining`` answering for the same
  sites' addresses; and the query alone in this process (index load plus
  the answer), the "well under a second" the issue asks for.

Medians of ``repeat`` runs.  Results go to ``bench/results/dwarf.json`` and
a short ``dwarf.md`` that names the commands.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..common.errors import UserError
from ..common.files import write_all
from ..common.paths import REPO


def _largest(paths: Sequence[Path]) -> Path:
    from ..image.elf import KernelImage

    def debug_bytes(p: Path) -> int:
        data = KernelImage.open(str(p)).section_data(".debug_info")
        return len(data) if data else 0

    return max(paths, key=debug_bytes)


def _timed(cmd: List[str], env: Optional[Dict[str, str]] = None, stdin: str = "") -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "CI": "1", **(env or {})})
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or [""])[-1]
        raise UserError(f"bench: {' '.join(cmd[:4])} failed ({proc.returncode}): {err}")
    return secs


def _median(f, repeat: int) -> float:
    return round(statistics.median(f() for _ in range(repeat)), 4)


def bench_dwarf(out_dir: Path, image: Optional[str] = None, repeat: int = 3) -> dict:
    """Time the index build and the queries; write dwarf.json and dwarf.md into ``out_dir``."""
    from ..analysis.indexcache import open_index
    from ..analysis.inlines import inline_copies
    from ..analysis.lines import line_sites
    from .debsrc import all_images
    from ..image.elf import KernelImage

    dwarfdump, symbolizer = shutil.which("llvm-dwarfdump"), shutil.which("llvm-symbolizer")
    if not dwarfdump or not symbolizer:
        raise UserError("bench: llvm-dwarfdump and llvm-symbolizer, the references, are not installed "
                        "(apt-get install llvm; ./bootstrap installs it)")
    path = Path(image) if image else _largest(all_images())
    img = KernelImage.open(str(path))
    with tempfile.TemporaryDirectory(prefix="kinstkit-bench-dwarf-") as tmp:
        cache = Path(tmp)
        build_code = ("import sys; from pathlib import Path; from generator.image.elf import KernelImage; "
                      "from generator.analysis.indexcache import open_index; "
                      "open_index(KernelImage.open(sys.argv[1]), cache_dir=Path(sys.argv[2]))")
        builds = []
        for i in range(repeat):
            builds.append(_timed([sys.executable, "-c", build_code, str(path), str(cache / f"b{i}")]))
        llvm_read = _median(lambda: _timed([dwarfdump, "--debug-info", "--debug-line", str(path)]), repeat)
        index, info = open_index(img, cache_dir=cache / "b0")

        line_spec, inline_name = _busiest(img, index)
        sites = line_sites(img, index, line_spec)
        copies = inline_copies(img, index, inline_name)

        def query() -> float:
            t0 = time.perf_counter()
            im = KernelImage.open(str(path))
            ix, _ = open_index(im, cache_dir=cache / "b0")
            line_sites(im, ix, line_spec)
            inline_copies(im, ix, inline_name)
            return time.perf_counter() - t0

        in_process = _median(query, repeat)
    # The command line with the real cache: warm it first, as a user's second query finds it.
    base = [sys.executable, "-m", "generator", "probes", "--kernel", str(path), "--json"]
    line_cmd, inline_cmd = base + ["--line", line_spec], base + ["--inline", inline_name]
    _timed(line_cmd)
    cli_line = _median(lambda: _timed(line_cmd), repeat)
    cli_inline = _median(lambda: _timed(inline_cmd), repeat)
    addresses = "\n".join(hex(s.address) for s in sites)
    sym_cmd = [symbolizer, "--inlining", f"--obj={path}"]
    llvm_sym = _median(lambda: _timed(sym_cmd, stdin=addresses), repeat)
    counts = index.counts()
    debug_info = len(KernelImage.open(info.path).section_data(".debug_info") or b"")
    result = {
        "image": str(path),
        "debug_file": info.path,
        "debug_info_mib": round(debug_info / 2**20, 2),
        **counts,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "repeat": repeat,
        "index_build": {
            "command": f"open_index() in a fresh process and cache directory (python -c ...), {path.name}",
            "seconds": round(statistics.median(builds), 3),
            "runs": [round(b, 3) for b in builds],
            "reference_command": f"llvm-dwarfdump --debug-info --debug-line {path.name}",
            "reference_seconds": llvm_read,
        },
        "query": {
            "line": line_spec,
            "line_sites": len(sites),
            "inline": inline_name,
            "inline_copies": len(copies),
            "in_process_seconds": in_process,
            "cli_line_command": "python " + " ".join(line_cmd[1:]),
            "cli_line_seconds": cli_line,
            "cli_inline_command": "python " + " ".join(inline_cmd[1:]),
            "cli_inline_seconds": cli_inline,
            "reference_command": f"llvm-symbolizer --inlining --obj={path.name} < the {len(sites)} site addresses",
            "reference_seconds": llvm_sym,
        },
        "goal": "queries after the first well under a second",
        "goal_met": in_process < 1.0 and max(cli_line, cli_inline) < 1.0,
    }
    _write(out_dir, result)
    return result


def _busiest(img, index) -> tuple:
    """The query inputs: the line with the most sites, and the function inlined most often."""
    from collections import Counter

    keys = Counter((k >> 32, k & 0xFFFFFFFF) for k in index.line_keys)
    (fid, line), _ = max(keys.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))
    names = Counter(index.inl_name)
    nid, _ = max(names.items(), key=lambda kv: (kv[1], -kv[0]))
    return f"{index.files[fid]}:{line}", index.names[nid]


def _write(out_dir: Path, r: dict) -> None:
    b, q = r["index_build"], r["query"]
    md = [
        "# Source-line and inline index benchmark",
        "",
        f"Made by `python3 -m invoke bench` (`python -m generator bench`, `generator.bench.dwarf`) on {r['date']}, "
        f"{r['cpus']} CPUs, Python {r['python']}; medians of {r['repeat']} runs.",
        "",
        f"Image: `{r['image']}` ({r['debug_info_mib']} MiB of .debug_info: {r['rows']} line rows, "
        f"{r['functions']} functions, {r['inlined_copies']} inlined copies, {r['files']} files).",
        "",
        "| step | seconds | reference | reference seconds |",
        "|---|---|---|---|",
        f"| index build, once per image (cold process, empty cache) | {b['seconds']:.2f} | `{b['reference_command']}` "
        f"| {b['reference_seconds']:.2f} |",
        f"| query in process: load the cached index, `--line {q['line']}` ({q['line_sites']} sites) and "
        f"`--inline {q['inline']}` ({q['inline_copies']} copies) | {q['in_process_seconds']:.3f} | | |",
        f"| `probes --line` as a command (start, load, answer) | {q['cli_line_seconds']:.2f} | "
        f"`{q['reference_command']}` | {q['reference_seconds']:.2f} |",
        f"| `probes --inline` as a command | {q['cli_inline_seconds']:.2f} | | |",
        "",
        f"Goal: {r['goal']}: **{'met' if r['goal_met'] else 'missed'}**.",
        "",
    ]
    write_all([(out_dir / "dwarf.json", json.dumps(r, indent=2) + "\n"), (out_dir / "dwarf.md", "\n".join(md))])
