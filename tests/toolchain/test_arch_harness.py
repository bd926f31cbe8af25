"""The execution proof on arm64 and riscv64, under qemu-user: the generated core runs real code, counts are right.

For each ISA, every eligible instruction of a real library -- Lua 5.4,
cross-built from Debian's source with frame pointers, run by its own
interpreter on a script -- and of the kfix fixture (tests/fixtures/harness/,
whose assembly plants every emulated class) is probed, the command runs under
the ISA's qemu-user plain and probed, the outputs must be identical, and
every probe's hit count must equal QEMU's own count of how often it executed
that address (one instruction per translation block, its exec log): a counter
that knows nothing of breakpoints, trampolines or the table.  Every emulated
class must be hit, and every conditional one both ways.  The negative tests
show a contradicting record refused, a foreign breakpoint passed on, and the
count comparison able to fail.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from generator import isa as isa_registry
from generator.image.elf import KernelImage
from generator.run import harness, qemu
from generator.run.audit import ENV_PAD, PAD_ROOM, audit_env, padded_like
from helpers import cross
from helpers.paths import HARNESS_FIXTURES

WHY = "the harness runs the ISA's programs under qemu-user, built with its cross compiler"
LUA_SCRIPT = HARNESS_FIXTURES / "lua_work.lua"


@pytest.fixture(scope="module", params=("arm64", "riscv"))
def arch(request) -> cross.Arch:
    return cross.require_cross(request.param, WHY)


@pytest.fixture(scope="module")
def kfix(arch):
    return cross.kfix(arch)


@pytest.fixture(scope="module")
def kfix_run(kfix):
    return harness.run_harness(str(kfix["lib"]), [str(kfix["linked"]), "60"], all_functions=True, verify=True)


def assert_proved(res) -> None:
    assert res.identical, res.differences
    assert not res.errors and not res.refused, (res.errors, res.refused[:5])
    assert res.placed == res.tabled > 0
    v = res.verify
    assert v["counter"] == "qemu" and v["equal"], (v["errors"], v["mismatches"][:10])
    assert v["instructions"] == sum(res.hits) > 0


def test_fixture_every_class_matches_qemu_both_ways(arch, kfix_run):
    res = kfix_run
    assert_proved(res)
    kinds = [k.kind for k in isa_registry.by_name(arch.name).table_kinds]
    by_kind = res.hits_by_kind()
    assert all(by_kind.get(k, 0) > 0 for k in kinds), by_kind
    conditional = isa_registry.by_name(arch.name).oracle.conditional_kinds
    both = {k: 0 for k in conditional}
    for name, j in res.verify["jcc"].items():
        if 0 < j["taken"] < j["executed"]:
            both[j["kind"]] += 1
    assert all(n > 0 for n in both.values()), both
    # The planted conditional branches each go both ways (b.al and tbz wzr cannot).
    planted = [(n, j) for n, j in res.verify["jcc"].items() if n.startswith("kfix_asm_branches:")]
    one_way = [n for n, j in planted if not 0 < j["taken"] < j["executed"]]
    assert len(planted) >= (22 if arch.name == "arm64" else 9) and len(one_way) <= 2, one_way


def test_lua_every_eligible_instruction_matches_qemu(arch):
    lua = cross.lua(arch)
    res = harness.run_harness(str(lua["lib"]), [str(lua["lua"]), str(LUA_SCRIPT), "40"], all_functions=True,
                              verify=True)
    assert_proved(res)
    assert res.tabled > 30000 and sum(res.hits) > 300000 and sum(1 for n in res.hits if n) > 10000
    assert res.plain.stdout.startswith(b"n=40 acc=")


def test_a_foreign_breakpoint_still_ends_the_program(kfix):
    """The driver's own brk/ebreak is not the harness's: the default action kills both runs alike."""
    res = harness.run_harness(str(kfix["lib"]), [str(kfix["linked"]), "20", "int3"], all_functions=True)
    assert res.identical and res.probed.status == res.plain.status != 0, (res.plain.status, res.probed.status)


def _probe_of_kind(plan, func: str, kind: str):
    return next(p for p in plan.probes() if plan.funcs[p.func].name == func and p.kind == kind)


def test_a_record_that_contradicts_the_word_is_refused(arch, kfix):
    """A branch recorded as a plain instruction: the core sees the live word disagree and refuses that probe."""
    isa = isa_registry.by_name(arch.name)
    plan = harness.kinst.build_plan(KernelImage.open(str(kfix["lib"])), [], True)
    kind = "b.cond" if arch.name == "arm64" else "branch"
    p = _probe_of_kind(plan, "kfix_asm_branches", kind)
    f = plan.funcs[p.func]
    recs = list(isa.stream_decode(f.records, f.size))
    records = b"".join(isa.stream_record(i.length, "trampoline" if i.offset == p.offset else i.kind, 0, i.masks)
                       for i in recs)
    funcs = list(plan.funcs)
    funcs[p.func] = f._replace(records=records)
    res = harness.run_harness(str(kfix["lib"]), [str(kfix["linked"]), "20"],
                              plan=dataclasses.replace(plan, funcs=tuple(funcs)))
    assert res.identical, res.differences
    assert res.refused == [{"probe": f"{f.qualified}:{p.offset}",
                            "reason": f"the record of kfix_asm_branches:{p.offset} contradicts the live instruction"}]


def test_the_count_comparison_can_fail(kfix_run, kfix, tmp_path):
    """One hit more on one probe, and QEMU's count names exactly that probe."""
    res = kfix_run
    b = harness.build(str(kfix["lib"]), all_functions=True)
    hits = list(res.hits)
    i = next(k for k, n in enumerate(hits) if n)
    hits[i] += 1
    like = {**audit_env(b.lib, tmp_path / "hits", "probe"), ENV_PAD: "x" * PAD_ROOM}
    v = qemu.compare(b, [str(kfix["linked"]), "60"], hits, tmp_path, 300, like)
    assert not v["equal"] and [m["probe"] for m in v["mismatches"]] == [b.probe_name(i)]


ADDRESSES_C = r"""
#include <stdio.h>
int main(int argc, char **argv) { int local; printf("%p %p\n", (void *)argv[argc - 1], (void *)&local); return 0; }
"""


def test_the_counting_run_starts_with_the_probed_runs_stack_layout(arch, tmp_path):
    """qemu-user lays out the stack below the environment's strings: a counting run whose environment differs
    in size from the probed run's sees its arguments elsewhere (Lua then takes other paths), padded it does not."""
    src, prog = tmp_path / "addresses.c", tmp_path / "addresses"
    src.write_text(ADDRESSES_C)
    subprocess.run([arch.gcc, "-O1", "-o", str(prog), str(src)], check=True)
    lib = tmp_path / "libkinst_harness.so"
    probed = {**audit_env(lib, tmp_path / "hits", "probe"), ENV_PAD: "x" * PAD_ROOM}
    counting = audit_env(lib, tmp_path / "locate1", "locate")

    def addresses(env) -> bytes:
        env = {k: v for k, v in env.items() if k not in ("LD_AUDIT", "LD_PRELOAD")}  # the program alone
        res = cross.run_under_qemu(arch, [str(prog), "arg"], env)
        assert res.returncode == 0, res.stderr
        return res.stdout

    assert addresses(padded_like(counting, probed)) == addresses(probed)
    assert addresses(counting) != addresses(probed)
