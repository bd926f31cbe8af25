"""The command line as users run it: output shapes, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.skips import require_system_library, require_tool

PROBE_KEYS = {
    "offset", "address", "length", "bytes", "mnemonic", "operands", "status", "reason", "flags",
    "instlen", "tinstlen", "template", "dispoff", "disp", "reg1", "reg2", "scale",
}
FUNC_KEYS = {"function", "address", "size", "eligible", "reason", "probes"}


@pytest.fixture(scope="module")
def libz() -> str:
    """The machine's libz: a shared object nobody here wrote."""
    return str(require_system_library("libz.so.1"))


def run(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "generator", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def assert_one_line_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout == ""
    for n in needles:
        assert n in lines[0], lines[0]


def test_default_runs_on_sample_vm_fault(sample_kernel):
    res = run("probes")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("vm_fault @ 0x")
    assert lines[1].startswith("kinst::vm_fault:0 ")
    assert " 55 " in lines[1] and "pushq %rbp" in lines[1]
    # The man page's example: the third instruction is at offset 4.
    assert lines[3].startswith("kinst::vm_fault:4 ")


def test_json_has_the_documented_keys(sample_kernel):
    res = run("probes", "--function", "vm_fault", "--json")
    assert res.returncode == 0, res.stderr
    obj = json.loads(res.stdout)
    assert FUNC_KEYS <= set(obj)
    assert obj["function"] == "vm_fault" and obj["eligible"] is True
    assert obj["probes"] and PROBE_KEYS <= set(obj["probes"][0])
    assert obj["probes"][0]["bytes"] == "55"
    offsets = [p["offset"] for p in obj["probes"]]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert sum(p["length"] for p in obj["probes"]) == obj["size"]


def test_offset_selects_one_instruction(sample_kernel):
    res = run("probes", "--function", "vm_fault", "--offset", "4", "--json")
    assert res.returncode == 0, res.stderr
    probes = json.loads(res.stdout)["probes"]
    assert [p["offset"] for p in probes] == [4]


def test_all_json_is_one_object_per_line_and_quiet(sample_kernel):
    res = run("probes", "--all", "--json")
    assert res.returncode == 0, res.stderr
    objs = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(objs) > 20
    assert res.stderr == ""  # no progress in JSON mode
    names = {o["function"] for o in objs}
    assert "vm_fault" in names and "amd64_syscall" in names


def test_all_summary_matches_full_counts(libz):
    full = [json.loads(x) for x in run("probes", "--kernel", libz, "--all", "--json").stdout.splitlines()]
    summ = [json.loads(x) for x in run("probes", "--kernel", libz, "--all", "--json", "--summary").stdout.splitlines()]
    assert [f["function"] for f in full] == [s["function"] for s in summ]
    for f, s in zip(full, summ):
        assert s["instructions"] == len(f["probes"])
        assert s["probes"] == sum(1 for p in f["probes"] if p["status"] == "ok")


def test_unknown_function(sample_kernel):
    assert_one_line_error(run("probes", "--function", "no_such_function"), "unknown function", "no_such_function")


def test_ambiguous_local_function_lists_candidates(sample_kernel):
    res = run("probes", "--function", "sysctl_handle")
    assert_one_line_error(res, "ambiguous", "sysctl_handle@", "0x")


def test_ambiguous_local_function_picked_by_file(sample_kernel):
    res = run("probes", "--function", "sysctl_handle", "--json")
    cand = res.stderr.split("pick one of ")[1].split(" or ")[0]
    res = run("probes", "--function", cand, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["function"] == cand


def test_offset_off_boundary_names_neighbours(sample_kernel):
    assert_one_line_error(
        run("probes", "--function", "vm_fault", "--offset", "2"), "not on an instruction boundary", "nearest: 1 and 4"
    )


def test_missing_file():
    assert_one_line_error(run("probes", "--kernel", "/nonexistent/kernel"), "no such file")


def test_not_elf(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello\n")
    assert_one_line_error(run("probes", "--kernel", str(p)), "not an ELF file")


def test_truncated_elf(tmp_path, libz):
    data = Path(libz).read_bytes()
    p = tmp_path / "half.so"
    p.write_bytes(data[: len(data) // 2])
    assert_one_line_error(run("probes", "--kernel", str(p), "--all"), "truncated")


def test_stripped_image(tmp_path, sample_kernel):
    strip = require_tool("strip", "binutils", "the test strips the sample kernel's symbols")
    p = tmp_path / "kernel.stripped"
    subprocess.run([strip, "-o", str(p), str(sample_kernel)], check=True)
    assert_one_line_error(run("probes", "--kernel", str(p)), "no function symbols")


def test_foreign_architecture(tmp_path, libz):
    data = bytearray(Path(libz).read_bytes())
    data[18:20] = (21).to_bytes(2, "little")  # EM_PPC64: no kinst port, no ISA here
    p = tmp_path / "ppc64.so"
    p.write_bytes(bytes(data))
    assert_one_line_error(run("probes", "--kernel", str(p)), "machine EM_PPC64",
                          "EM_AARCH64 (arm64), EM_RISCV (riscv), EM_X86_64 (amd64) images only")


def _on_a_terminal(tmp_path, cmd: str, ci: bool) -> str:
    """Run ``cmd`` with stdout/stderr on a pseudo-terminal (util-linux script)."""
    script = require_tool("script", "util-linux", "no other way to give the command a terminal")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    log = tmp_path / "tty.log"
    subprocess.run([script, "-qec", cmd, str(log)], env=env, stdin=subprocess.DEVNULL, check=True, timeout=300)
    return log.read_text(errors="replace")


def test_all_shows_progress_on_a_terminal_only(tmp_path, libz):
    from generator.image.elf import KernelImage

    total = len(KernelImage.open(libz).functions())
    base = f"{sys.executable} -m generator probes --kernel {libz} --all --summary"
    assert f"{total}/{total} functions" in _on_a_terminal(tmp_path, base + " > /dev/null", ci=False)
    assert "functions" not in _on_a_terminal(tmp_path, base + " > /dev/null", ci=True)
    assert "functions" not in _on_a_terminal(tmp_path, base + " --json > /dev/null", ci=False)
