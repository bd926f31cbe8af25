"""Values proven on execution: the harness reads variables at probe sites of real code, gdb prints them at the
same hits, and the two must agree.

Two runs of the same program on the same inputs, address randomization off
in both (``setarch -R``; gdb turns it off itself), with environments of
the same size (``audit.padded_like``: the stack, and with it every stack
address, starts at the same place):

1. probed: the harness library with the sites' readings
   (``generator.run.varsprobe``) evaluates each reading at each of a
   site's first hits, in its trap handler;
2. gdb: the same library in locate mode (so that the same libraries are
   mapped the same way), a breakpoint at each site (``break *ADDR``) whose
   commands ``print/x`` each reading the first hits and continue.

A reading gdb prints ``<optimized out>`` for must be one kinstkit says has
no value there; one gdb cannot name in the frame it stops in (a variable of
the caller of an inlined copy, when gdb shows the copy's frame) is counted
and not compared.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, NamedTuple, Sequence, Tuple

from helpers.skips import missing, require_tool



class Compared(NamedTuple):
    compared: int  # values equal in both
    sites: int  # sites with at least one value compared
    hits: int  # site hits compared
    not_available_ours: int  # readings kinstkit says have no value, where gdb says <optimized out>
    gdb_unnamed: int  # readings gdb could not name at the stop (another frame's variable)
    entry_values: int  # gdb had a value where kinstkit needs DW_OP_entry_value
    mismatches: List[str]


def _setarch() -> List[str]:
    tool = shutil.which("setarch")
    if tool is None:
        missing("setarch not installed (apt-get install util-linux): the runs must not randomize addresses")
    return [tool, os.uname().machine, "-R"]


def prove(lib: Path, lua: Path, script: Path, functions: Sequence[str], max_sites: int, nhits: int = 5) -> Compared:
    """Probe ``functions`` of ``lib`` at up to ``max_sites`` sites the script reaches that have values, run
    ``lua script`` probed and under gdb, and compare every value of the first ``nhits`` hits of each site.  The
    script is a file: gdb would take the quotes of an inline ``-e`` chunk as its own."""
    from generator.analysis.indexcache import open_source
    from generator.analysis.lines import function_sites
    from generator.image.elf import KernelImage
    from generator.render import Input
    from generator.run import harness, varsprobe
    from generator.run.audit import ENV_PAD, PAD_ROOM, audit_env, padded_like, read_hits

    gdb = require_tool("gdb", "gdb", "the oracle for variable values")
    img = KernelImage.open(str(lib))
    command = [*_setarch(), str(lua), str(script)]
    with tempfile.TemporaryDirectory(prefix="kinstkit-values-") as tmp:
        # Which instructions the script reaches: a counting run of the same table first.
        counting = harness.build(str(lib), functions)
        prefix = Path(tmp) / "count"
        run = subprocess.run(command, env=audit_env(counting.lib, prefix, "probe"), capture_output=True, timeout=300)
        assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
        hits, _ = read_hits(prefix, len(counting.probes))
        reached = {counting.link_address(i) for i, n in enumerate(hits) if n}
    src = open_source(img)
    sites, gone = [], []
    for name in functions:
        func = img.lookup(name)
        index = src.for_range(func.address, func.address + func.size)
        reader = src.variables(index)
        for s in function_sites(img, index, func):
            if s.status != "ok" or s.address not in reached:
                continue
            # gdb names a variable in the frame it stops in -- the innermost inlined copy's function, whose scopes
            # its lookup does not leave -- so only that function's variables are compared.
            frame = s.inlined[0] if s.inlined else s.function
            variables = [v for v in reader.at(s.address) if v.function == frame]
            names = list(dict.fromkeys(v.name for v in variables))
            readings = [reader.reading(variables, n) for n in names]
            if any(r.value is not None for r in readings):
                sites.append(varsprobe.VarSite(s.address, f"{s.function}+{s.offset}",
                                               tuple(r for r in readings if r.value is not None)))
                gone.append(tuple(r for r in readings if r.value is None and r.ctype is not None))
    step = max(1, len(sites) // max_sites)
    sites, gone = sites[::step][:max_sites], gone[::step][:max_sites]
    header = varsprobe.render(sites, img.isa, "tests/helpers/valueproof.py",
                              [Input(str(lib), img.build_id or "", img.sha256())], nhits)
    b = harness.build(str(lib), functions, generated=[header], optional=(varsprobe.GLUE,))
    with tempfile.TemporaryDirectory(prefix="kinstkit-values-") as tmp:
        prefix = Path(tmp) / "run"
        env = audit_env(b.lib, prefix, "probe")
        env[ENV_PAD] = "x" * PAD_ROOM  # room for the gdb run's environment to take the same size
        probed = subprocess.run(command, env=env, capture_output=True, timeout=300)
        assert probed.returncode == 0, probed.stderr.decode(errors="replace")[-2000:]
        values = varsprobe.read_values(prefix, sites)
        assert len(values) == 1, f"one process expected, got {sorted(values)}"
        ours = next(iter(values.values()))
        gdb_env = padded_like(audit_env(b.lib, Path(tmp) / "gdb", "locate"), env)
        theirs = _gdb(gdb, lua, script, lib, [(s.address, [r.spec for r in s.readings + g]) for s, g in
                                              zip(sites, gone)], nhits, gdb_env)
    return _compare(sites, gone, ours, theirs)


_GDB_SCRIPT = """
import json, struct
import gdb

SITES, NHITS, ANCHOR, OUT = json.loads(%r)
out = open(OUT, "w")
for command in ("set startup-with-shell off", "unset environment LINES", "unset environment COLUMNS",
                "set pagination off", "set confirm off", "break main", "run", "delete"):
    gdb.execute(command, to_string=True)
bias = int(gdb.parse_and_eval("(unsigned long)&lua_newstate")) - ANCHOR


def text(expr):
    try:
        v = gdb.parse_and_eval(expr)
        if v.is_optimized_out:
            return "<optimized out>"
        if "<synthetic pointer>" in str(v):
            return "<synthetic pointer>"
        t = v.type.strip_typedefs()
        if t.code == gdb.TYPE_CODE_FLT:
            return hex(struct.unpack("<Q" if t.sizeof == 8 else "<I", struct.pack("<d" if t.sizeof == 8 else "<f",
                                                                                   float(v)))[0])
        return hex(int(v) & ((1 << (8 * t.sizeof)) - 1))
    except gdb.error as e:
        return "<unnamed: " + str(e) + ">"
    except Exception as e:  # a value gdb has but cannot make a number of (a synthetic pointer)
        return "<error: " + str(e) + ">"


points = {}
for k, address, specs in SITES:
    bp = gdb.Breakpoint("*" + hex(bias + address))  # a user's: gdb then selects the innermost inlined frame
    points[bias + address] = (k, specs, bp, [0])
# Stop at each breakpoint as a user would and print in the frame gdb selects there (it shows the innermost
# inlined copy whose code the address is), then continue; a site is disabled after its first NHITS hits.
while True:
    try:
        gdb.execute("continue", to_string=True)
        frame = gdb.selected_frame()
    except gdb.error:
        break  # the program exited
    got = points.get(frame.pc())
    if got is None:
        continue
    k, specs, bp, hits = got
    hits[0] += 1
    out.write(json.dumps([k, [text(s) for s in specs]]) + "\\n")
    if hits[0] >= NHITS:
        bp.enabled = False
out.close()
"""


def _gdb(gdb: str, lua: Path, script: Path, lib: Path, sites: Sequence[Tuple[int, List[str]]], nhits: int,
         env: Dict[str, str]) -> List[List[List[str]]]:
    """gdb's value of each reading at each of each site's first ``nhits`` hits, read by a Python breakpoint
    that never stops (an expression gdb cannot evaluate there is recorded, not an error that ends the run)."""
    import json

    from generator.image.elf import KernelImage

    anchor = KernelImage.open(str(lib)).lookup("lua_newstate").address
    with tempfile.TemporaryDirectory(prefix="kinstkit-gdb-") as tmp:
        result = Path(tmp) / "values.jsonl"
        config = json.dumps([[[k, address, specs] for k, (address, specs) in enumerate(sites)], nhits, anchor,
                             str(result)])
        (Path(tmp) / "values.py").write_text(_GDB_SCRIPT % config)
        proc = subprocess.run([gdb, "-nx", "-batch", "-x", str(Path(tmp) / "values.py"), "--args", str(lua),
                               str(script)], env=env, capture_output=True, text=True, timeout=900)
        assert result.exists(), proc.stderr[-2000:]
        out: List[List[List[str]]] = [[] for _ in sites]
        for line in result.read_text().splitlines():
            k, values = json.loads(line)
            out[k].append(values)
    return out


def _compare(sites, gone, ours, theirs) -> Compared:
    """Every value the harness read against gdb's; every value kinstkit says is not available against gdb's
    ``<optimized out>`` (or a case the reason names)."""
    from generator.analysis.locations import ENTRY_VALUE

    compared = nsites = hits = noval = unnamed = entry = 0
    bad: List[str] = []
    for k, s in enumerate(sites):
        site_compared = 0
        if len(ours[k]) != len(theirs[k]):
            bad.append(f"{s.label}: {len(ours[k])} hits recorded by the harness, {len(theirs[k])} by gdb")
        for hit, (row, printed) in enumerate(zip(ours[k], theirs[k])):
            hits += 1
            if len(printed) != len(s.readings) + len(gone[k]):
                bad.append(f"{s.label} hit {hit}: gdb printed {len(printed)} values for "
                           f"{len(s.readings) + len(gone[k])} readings")
                continue
            for r, value, text in zip(s.readings, row, printed):
                if text.startswith("<unnamed") or text.startswith("<error"):
                    unnamed += 1
                    continue
                if text == "<optimized out>":
                    bad.append(f"{s.label} hit {hit}: {r.spec} = {value.value!r} ({r.d}), gdb <optimized out>")
                    continue
                if value.status != "ok":
                    bad.append(f"{s.label} hit {hit}: {r.spec}: ours {value.status} ({r.d}), gdb {text}")
                    continue
                mask = (1 << (8 * r.ctype.size)) - 1
                if value.value & mask != int(text, 16) & mask:
                    bad.append(f"{s.label} hit {hit}: {r.spec} ({r.ctype.name}) = {value.value & mask:#x} by "
                               f"{r.d}, gdb {text}")
                    continue
                compared += 1
                site_compared += 1
            for r, text in zip(gone[k], printed[len(s.readings):]):
                if text.startswith("<unnamed") or text.startswith("<error"):
                    unnamed += 1
                elif text == "<optimized out>":
                    noval += 1
                elif r.reason == ENTRY_VALUE:
                    entry += 1  # gdb finds the entry value through the call site; kinst cannot
                elif text == "<synthetic pointer>" and "implicit_pointer" in r.reason:
                    unnamed += 1  # gdb too has no address to print: the pointer was optimized away
                elif "not a scalar" in r.reason or "kinst's regs[] does not hold" in r.reason:
                    unnamed += 1  # an aggregate, or a value in a register D cannot read: named, not compared
                else:
                    bad.append(f"{s.label} hit {hit}: {r.spec}: ours not available ({r.reason}), gdb {text}")
        nsites += 1 if site_compared else 0
    return Compared(compared, nsites, hits, noval, unnamed, entry, bad)
