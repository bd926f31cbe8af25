"""Values proven on execution: the harness reads the variables ``--vars`` promises at probe sites of real
Lua 5.4 (Debian's source, built ``-g -O2`` and ``-g -O0`` for this machine) at each hit, and gdb prints the
same variables at the same hits (``break *ADDR``, ``print``, batch mode, same inputs): they must be equal,
and where kinstkit says a value is not available gdb must say ``<optimized out>`` (``helpers.valueproof``
names the other cases it counts and does not compare).

The harness evaluates a program printed from the same location record as the D expression
(``locations.program`` and ``locations.d_text`` over one ``Node``), so a value the harness gets right is
one the D script reads from the same place.  ``-O0`` is held on functions whose locals are all assigned
before the sites the script reaches: an uninitialized stack slot (``luaV_execute``'s block locals before
their assignment) holds whatever earlier code left there, and the harness's own signal frames are such
code, so the two runs legitimately differ there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.luanative import lua_native
from helpers.paths import REPO
from helpers.valueproof import prove

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the harness is an rtld audit library (Linux)")

SCRIPT = """local t = {}
for i = 1, 50 do t['k' .. i] = i * 3 end
local s = 0
for k, v in pairs(t) do s = s + v end
print(s, #t, string.format('%d', s))
"""
O2_FUNCTIONS = ("luaH_getshortstr", "luaS_newlstr", "luaH_next", "luaH_newkey", "luaD_precall", "luaO_arith")
# Not luaS_newlstr: its ``ts`` is read at +89 (after the luaM_toobig check) before it is assigned.
O0_FUNCTIONS = ("luaH_getshortstr", "luaH_next")


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lua") / "values.lua"
    path.write_text(SCRIPT)
    return path


def _report(got) -> str:
    return f"{got._replace(mismatches=len(got.mismatches))}\n" + "\n".join(got.mismatches[:20])


def test_values_at_O2_sites_equal_gdbs(script):
    lua = lua_native("-O2")
    got = prove(lua["lib"], lua["lua"], script, O2_FUNCTIONS, max_sites=24)
    assert not got.mismatches, _report(got)
    assert got.sites >= 12 and got.compared >= 100, _report(got)
    # Optimized code has values it cannot give at some sites, and gdb agrees it has none there.
    assert got.not_available_ours >= 10, _report(got)


def test_values_at_O0_sites_equal_gdbs(script):
    lua = lua_native("-O0")
    got = prove(lua["lib"], lua["lua"], script, O0_FUNCTIONS, max_sites=12)
    assert not got.mismatches, _report(got)
    assert got.sites >= 8 and got.compared >= 100, _report(got)


def test_a_wrong_location_is_caught(script, monkeypatch):
    """The proof can fail: every harness program reading 8 bytes past its value's place disagrees with gdb."""
    from generator.analysis import locations as L

    real = L.program
    monkeypatch.setattr(L, "program", lambda node: real(L.add(node, 8)))
    lua = lua_native("-O2")
    got = prove(lua["lib"], lua["lua"], script, O2_FUNCTIONS[:2], max_sites=6)
    assert len(got.mismatches) >= 10, _report(got)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "CI": "1",
                                            "HOME": str(Path.home())})


def test_vars_at_a_function_offset_follow_the_psabi():
    """``--function F --offset 0 --vars --json``: at entry the two pointer parameters of luaH_getshortstr are
    in %rdi and %rsi, as the System V psABI passes them (an oracle that shares nothing with the reader)."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the psABI check is the amd64 calling convention; this machine is " + platform.machine())
    lib = str(lua_native("-O2")["lib"])
    proc = _cli("probes", "--kernel", lib, "--function", "luaH_getshortstr", "--offset", "0", "--vars", "--json")
    assert proc.returncode == 0, proc.stderr
    sites = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(sites) == 1 and sites[0]["offset"] == 0
    got = {v["name"]: (v["type"], v["d"]) for v in sites[0]["variables"] if v["kind"] == "parameter"}
    assert got == {"t": ("Table *", "(uint64_t)(regs[R_RDI])"), "key": ("TString *", "(uint64_t)(regs[R_RSI])")}
    text = _cli("probes", "--kernel", lib, "--function", "luaH_getshortstr", "--offset", "0", "--vars")
    assert text.returncode == 0 and "regs[R_RDI]" in text.stdout and "Table *" in text.stdout, text.stderr


def test_kinst_line_print_reads_what_vars_says(tmp_path):
    """``dscript kinst-line FILE:LINE --print`` (invoke: ``--target FILE:LINE``): each site's clause prints each
    variable by the very expression ``probes --line FILE:LINE --vars --json`` gives there, says where it comes
    from, and marks the sites that cannot have it; a name no site has is one line and exit 2."""
    lib = str(lua_native("-O2")["lib"])
    line = "ltable.c:763"  # luaH_getshortstr's chain walk, inlined into luaH_getstr and luaH_get
    vars_run = _cli("probes", "--kernel", lib, "--line", line, "--vars", "--json")
    assert vars_run.returncode == 0, vars_run.stderr
    expected = {}
    for site in map(json.loads, vars_run.stdout.splitlines()):
        if site["status"] == "ok":
            inner = [v for v in site["variables"] if v["name"] == "n"]
            expected[f"kinst::{site['function']}:{site['offset']}"] = inner[0]["d"]
    d = _cli("dscript", "kinst-line", line, "--kernel", lib, "--print", "n,key->hash,nx")
    assert d.returncode == 0, d.stderr
    clauses = d.stdout.split("\nkinst::")[1:]
    assert clauses and len(clauses) == len(expected), d.stdout
    for clause in clauses:
        probe = "kinst::" + clause.split("\n", 1)[0]
        assert f"    {expected[probe]}," in clause, (probe, expected[probe], clause)
    assert "nx=<unavailable>" in d.stdout and "nx: not available here" in d.stdout
    assert "key->hash (unsigned int): memory at regs[R_RSI] + 0xc" in d.stdout
    bad = _cli("dscript", "kinst-line", line, "--kernel", lib, "--print", "nosuch")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nosuch" in bad.stderr
