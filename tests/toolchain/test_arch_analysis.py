"""arm64 and riscv64 analysis on real and FreeBSD-built images: the decoder against the cross objdump, the CLI.

The images: Debian's cross C library (libc.so.6, nobody here wrote it), Lua
5.4 cross-built from Debian's source, and the kfix fixture built the way
FreeBSD builds a module for the ISA (clang --target=<isa>-unknown-freebsd14.3
with the kernel's flags; ld -r into an ET_REL .kld, then -Bshareable into an
ET_DYN .ko), plus the compiler's own ET_REL object.  ``verify-decoder``
compares every instruction boundary and direct branch target with
``aarch64-linux-gnu-objdump`` / ``riscv64-linux-gnu-objdump`` (riscv's
compressed instructions included); the commands users run give their usual
shapes; ``generate`` is deterministic and its output compiles with the ISA's
core under gcc and clang with -Werror.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator.kmod.sources import stage_sources
from generator.providers import PROVIDERS
from generator.run.harness import CORE_DIR, core_sources
from generator.verify.objdump import verify_decoder
from helpers import cross
from helpers.paths import FIXTURES
from helpers.skips import require_tools

MAPPING = FIXTURES / "mapping"

ARCHES = ("arm64", "riscv")
WHY = "the ISA's images are built and checked with its cross toolchain"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=600)


@pytest.fixture(scope="module", params=ARCHES)
def arch(request) -> cross.Arch:
    return cross.require_cross(request.param, WHY)


@pytest.fixture(scope="module")
def module(arch) -> dict:
    return cross.freebsd_module(arch.name)


def test_cross_libc_agrees_with_objdump(arch):
    res = verify_decoder(str(Path(arch.sysroot) / "lib" / "libc.so.6"))
    assert res.ok, res.summary() + "\n" + "\n".join(m.line() for m in res.mismatches)
    assert res.functions > 1500 and res.instructions > 100000 and res.branches > 15000


@pytest.mark.parametrize("kind", ["o", "kld", "ko", "kernel"])
def test_freebsd_built_module_agrees_with_objdump(module, kind):
    """ET_REL (the compiler's object, ld -r's .kld, relocations applied), ET_DYN (the .ko FreeBSD loads) and
    ET_EXEC (the same code linked as a kernel, at the ISA's kernel base)."""
    res = verify_decoder(str(module[kind]))
    assert res.ok, res.summary() + "\n" + "\n".join(m.line() for m in res.mismatches)
    assert res.functions >= (12 if kind == "o" else 18) and res.branches > 20 and res.tolerated_regions == 0


def test_lua_agrees_with_objdump(arch):
    res = verify_decoder(str(cross.lua(arch)["lib"]))
    assert res.ok, res.summary() + "\n" + "\n".join(m.line() for m in res.mismatches)
    assert res.instructions > 30000


def test_riscv_compressed_and_full_instructions_are_both_compared():
    arch = cross.require_cross("riscv", WHY)
    res = cli("probes", "--kernel", str(cross.freebsd_module("riscv")["ko"]), "--function", "kfix_asm_branches",
              "--json")
    assert res.returncode == 0, res.stderr
    lengths = {p["length"] for p in json.loads(res.stdout)["probes"]}
    assert lengths == {2, 4}, arch


def test_probes_text_and_json(module, arch):
    res = cli("probes", "--kernel", str(module["ko"]), "--function", "kfix_asm_branches")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("kfix_asm_branches @ 0x") and lines[1].startswith("kinst::kfix_asm_branches:0 ")
    res = cli("probes", "--kernel", str(module["ko"]), "--function", "kfix_asm_branches", "--json")
    obj = json.loads(res.stdout)
    assert obj["eligible"] and all({"kind", "status", "reason", "type", "emulate", "insn", "target"} <= set(p)
                                   for p in obj["probes"])
    conditional = "b.cond" if arch.name == "arm64" else "branch"
    taken = [p for p in obj["probes"] if p["kind"] == conditional]
    assert taken and all(p["target"] is not None and p["emulate"] for p in taken)


def test_all_summary_and_json_agree(module):
    summ = cli("probes", "--kernel", str(module["ko"]), "--all", "--summary", "--json", "--jobs", "1")
    full = cli("probes", "--kernel", str(module["ko"]), "--all", "--json", "--jobs", "1")
    assert summ.returncode == 0 and full.returncode == 0, summ.stderr + full.stderr
    counts = {json.loads(line)["function"]: json.loads(line)["probes"] for line in summ.stdout.splitlines()}
    for line in full.stdout.splitlines():
        f = json.loads(line)
        assert counts[f["function"]] == sum(p["status"] == "ok" for p in f["probes"])


def test_the_kernel_linked_copy_gets_the_modules_verdicts(module):
    """The same objects linked as an ET_EXEC kernel and as an ET_DYN .ko: per function, the same eligibility,
    instruction count and kinds; only the addresses move."""
    def summary(kind: str) -> dict:
        res = cli("probes", "--kernel", str(module[kind]), "--all", "--summary", "--json", "--jobs", "1")
        assert res.returncode == 0, res.stderr
        recs = [json.loads(line) for line in res.stdout.splitlines()]
        return {r["function"]: (r["eligible"], r["instructions"], r["kinds"]) for r in recs}
    kernel, ko = summary("kernel"), summary("ko")
    assert len(kernel) >= 18 and kernel == ko


def test_refusals_name_their_reason(module, arch):
    """The planted refusals show with their reasons: an exclusive block, and (arm64) writes kinst cannot restore."""
    res = cli("probes", "--kernel", str(module["ko"]), "--function", "kfix_asm_prefixed")
    block = "LDX/STX block" if arch.name == "arm64" else "LR/SC block"
    assert res.stdout.count(block) == 3, res.stdout
    if arch.name == "arm64":
        riprel = cli("probes", "--kernel", str(module["ko"]), "--function", "kfix_asm_riprel").stdout
        assert "writes x19 through emulation" in riprel and "load into x20" in riprel


def test_generate_is_deterministic_and_compiles_with_the_core(module, arch, tmp_path):
    require_tools("gcc", "clang", why="the generated table is compiled with the ISA's core")
    outs = []
    for n in (1, 2):
        res = cli("generate", "--kernel", str(module["ko"]), "--all", "--out", str(tmp_path / f"g{n}"))
        assert res.returncode == 0, res.stderr
        outs.append({p.name: p.read_bytes() for p in (tmp_path / f"g{n}").iterdir()})
    assert outs[0] == outs[1] and {"kinst_table.c", "kinst_encoding.h", "kinst_refused.txt"} <= set(outs[0])
    encoding = outs[0]["kinst_encoding.h"].decode()
    assert f"{'0xd42081a0' if arch.name == 'arm64' else '0x9002'}" in encoding
    gen = tmp_path / "g1"
    stage_sources(PROVIDERS["kinst"], gen)  # one complete module directory, as a build reads
    core = [gen / p.relative_to(CORE_DIR) for p in core_sources(arch.name)]
    sources = [p for p in core if p.suffix == ".c"] + [gen / "kinst_table.c"]
    includes = [f"-I{d}" for d in sorted({p.parent for p in core})]
    for cc in ("gcc", "clang"):
        for src in sources:
            proc = subprocess.run([cc, "-std=c99", "-ffreestanding", "-Wall", "-Wextra", "-Werror", "-c",
                                   *includes, str(src), "-o", str(tmp_path / "x.o")], capture_output=True, text=True)
            assert proc.returncode == 0, (cc, src.name, proc.stderr)


def test_a_program_of_another_isa_is_named_in_one_line(module, tmp_path):
    res = cli("harness", "--elf", str(module["ko"]), "--all", "--", sys.executable, "-c", "pass")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "program" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("name", ["arm64", "riscv"])
def test_data_inside_a_function_is_refused(name, tmp_path):
    """Words a $d mapping symbol marks as data are refused with that reason, in probes and in the generated
    table's refusals, though the same bytes are probed as code outside the range (and the code after the data
    is probed again)."""
    arch = cross.require_cross(name, "the fixture is assembled with the ISA's cross gcc")
    obj = tmp_path / "pool.o"
    relax = ["-mno-relax"] if name == "riscv" else []  # as FreeBSD builds riscv modules: no R_RISCV_ALIGN
    subprocess.run([arch.gcc, *relax, "-c", str(MAPPING / f"pool_{name}.S"), "-o", str(obj)], check=True)
    res = cli("probes", "--kernel", str(obj), "--function", "f_pool", "--json")
    assert res.returncode == 0, res.stderr
    probes = json.loads(res.stdout)["probes"]
    nop = "1f2003d5" if name == "arm64" else "13000000"
    data = [p for p in probes if "data inside the function" in p["reason"]]
    assert [p["bytes"] for p in data] == [nop, nop] and all(p["status"] == "skip" for p in data)
    if name == "arm64":  # the alignment nop before the pool is code: the same bytes, probed; so is f_after
        assert any(p["bytes"] == nop and p["status"] == "ok" for p in probes)
        res = cli("probes", "--kernel", str(obj), "--function", "f_after", "--json")
        after = json.loads(res.stdout)["probes"]
    else:  # the code after the data, from the $x that names its ISA
        after = [p for p in probes if p["offset"] > max(p["offset"] for p in data)]
    assert after and all(p["status"] == "ok" for p in after), after
    gen = cli("generate", "--kernel", str(obj), "--function", "f_pool", "--out", str(tmp_path / "gen"))
    assert gen.returncode == 0, gen.stderr
    refused = (tmp_path / "gen" / "kinst_refused.txt").read_text()
    assert refused.count("data inside the function") == 2, refused


def test_a_walk_that_leaves_data_mid_instruction_refuses_the_rest(tmp_path):
    """riscv: a .half of data makes the walk read a 4-byte instruction across the $x that follows; nothing
    after it is probed (every one of those boundaries is off by two bytes)."""
    arch = cross.require_cross("riscv", "the fixture is assembled with the ISA's cross gcc")
    obj = tmp_path / "half.o"
    subprocess.run([arch.gcc, "-mno-relax", "-c", str(MAPPING / "pool_riscv_half.S"), "-o", str(obj)], check=True)
    res = cli("probes", "--kernel", str(obj), "--function", "f_half", "--json")
    assert res.returncode == 0, res.stderr
    probes = json.loads(res.stdout)["probes"]
    i = next(k for k, p in enumerate(probes) if "data inside the function" in p["reason"])
    assert probes[i]["length"] == 4  # the datum and half of the next instruction, read as one
    assert [p["status"] for p in probes[:i]] == ["ok"] * i
    rest = probes[i + 1:]
    assert rest and all(p["status"] == "skip" and "decode walk crossed" in p["reason"] for p in rest)
