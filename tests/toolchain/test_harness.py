"""The execution harness: the generated core runs real code, and its counts are right.

The proof: every eligible instruction of the machine's zlib is probed while a
compress/decompress round trip runs through python3, and kernel-style
fixtures (tests/fixtures/harness/) make every emulation class run.  Each
probe's hit count must equal callgrind's count of how often that instruction
ran: an independent counter that knows nothing of int3, trampolines or the
table.  The negative tests show that the comparison can fail and that the
byte check refuses a probe whose bytes are not the table's.

Needs gcc (the harness library and the fixtures) and valgrind (the counter);
a test whose tool is missing skips and names it.  The callgrind reader and
the command line's parser, which run nothing, are in
tests/unit/test_harness_offline.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from generator.common.errors import UserError
from generator.image.elf import KernelImage
from generator.common.paths import BUILD
from helpers.paths import HARNESS_FIXTURES as FIXTURES
from helpers.skips import missing, require_system_library, require_tool

FIXTURE_BUILD = BUILD / "harness-fixtures"
# Kernel-ish flags, as FreeBSD's amd64 kernel builds, made runnable in user space.
KFLAGS = ["-O2", "-fno-omit-frame-pointer", "-mno-red-zone", "-Wall", "-Wextra", "-Werror"]
ALL_KINDS = (
    "trampoline", "riprel", "jmp-rel32", "jcc-rel32", "jmp-widen", "jcc-widen",
    "call-direct", "call-reg", "call-mem", "call-riprel",
)
# Encodings kfix_asm.S plants, by their first bytes: each must be probed and hit.
PLANTED = {
    "e8": "call rel32",
    "41ffd4": "call *%r12",
    "3effd0": "ds call *%rax (prefixed)",
    "ff542408": "call *8(%rsp): SIB without index",
    "ff14cd00000000": "call *0(,%rcx,8): SIB base 101, mod 00",
    "43ff54e500": "call *(%r13,%r12,8): base r13, mod 01",
    "ff55d8": "call *-40(%rbp)",
    "ff15": "call *slot(%rip)",
    "0f85": "jnz rel32",
    "e9": "jmp rel32",
    "2e74": "cs jz rel8 (prefixed, widened)",
    "3e75": "ds jnz rel8 (prefixed, widened)",
    "f2eb": "bnd jmp rel8 (prefixed, widened)",
    "8305": "addl $imm8, x(%rip)",
    "833d": "cmpl $imm8, x(%rip): immediate after the displacement",
    "c705": "movl $imm32, x(%rip)",
    "f30f7e05": "movq x(%rip), %xmm0",
    "ff25": "jmp *slot(%rip)",
    "f3a4": "rep movsb",
    "f348ab": "rep stosq",
    "f3a6": "repe cmpsb",
}


@pytest.fixture(scope="module")
def gcc() -> str:
    return require_tool("gcc", "gcc", "the harness compiles its preload library and the fixtures with it")


@pytest.fixture(scope="module")
def valgrind() -> str:
    return require_tool("valgrind", "valgrind", "callgrind is the independent counter")


@pytest.fixture(scope="module")
def zlib() -> Path:
    """The machine's libz.so.1, which this python's zlib module loads."""
    lib = require_system_library("libz.so.1")
    if not _python_uses(lib):
        missing(f"{sys.executable}'s zlib module does not load {lib}")
    return lib


def build_fixture(cc: str) -> Dict[str, Path]:
    """libkfix.so and its two drivers, built with ``cc`` and the kernel flags."""
    out = FIXTURE_BUILD / Path(cc).name
    out.mkdir(parents=True, exist_ok=True)
    lib, linked, dlopened = out / "libkfix.so", out / "kfix_linked", out / "kfix_dlopen"
    steps = [
        [cc, *KFLAGS, "-fPIC", "-shared", "-o", str(lib), str(FIXTURES / "kfix.c"), str(FIXTURES / "kfix_asm.S")],
        [cc, *KFLAGS, "-fno-pic", "-no-pie", "-o", str(linked), str(FIXTURES / "kfix_main.c"), f"-L{out}", "-lkfix",
         f"-Wl,-rpath,{out}"],
        [cc, *KFLAGS, "-fno-pic", "-no-pie", "-DKFIX_DLOPEN", "-o", str(dlopened), str(FIXTURES / "kfix_main.c"),
         "-ldl"],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return {"lib": lib, "linked": linked, "dlopen": dlopened}


@pytest.fixture(scope="module")
def kfix(gcc) -> Dict[str, Path]:
    return build_fixture(gcc)


def run(elf, command, **kw):
    from generator.run.harness import run_harness

    kw.setdefault("all_functions", True)
    return run_harness(str(elf), [str(c) for c in command], **kw)


def summary(res) -> str:
    j = res.to_json()
    cg = j.get("callgrind", {})
    return (
        f"{Path(res.elf).name}: {j['placed']}/{j['probes']} probes placed, {j['hits']} hits on "
        f"{j['probes_hit']} probes in {res.probed.seconds:.1f} s (plain {res.plain.seconds:.2f} s); "
        f"callgrind equal={cg.get('equal')} ({cg.get('executed')} executed, {cg.get('seconds')} s); "
        f"by class {json.dumps({k: v for k, v in j['hits_by_kind'].items() if v})}"
    )


def assert_proved(res) -> None:
    """Identical runs, nothing refused at run time, and every count equal to callgrind's."""
    assert res.identical, res.differences
    assert not res.errors, res.errors
    assert not res.refused, res.refused[:5]
    assert res.placed == res.tabled > 0
    v = res.verify
    assert v is not None
    assert not v["errors"], v["errors"]
    assert v["mismatches"] == [], v["mismatches"][:10]
    assert v["function_names_differ"] == [], v["function_names_differ"][:10]
    assert v["per_entry"] == res.hits
    assert v["equal"] and res.ok
    # Static trampolines, each block within rel32 reach of the whole image.
    lo = min(a for a, _, _ in layout_of(res.elf).segments)
    hi = max(a + m for a, m, _ in layout_of(res.elf).segments)
    for inst in res.instances:
        tramp, base = inst["tramp"], inst["bias"]
        assert tramp and max(abs(tramp - (base + lo)), abs(tramp + 32 * res.tabled - (base + hi))) < 2**31


def layout_of(elf):
    from generator.run.harness import layout

    return layout(KernelImage.open(elf))


# -- the zlib proof ---------------------------------------------------------------------


def _python_uses(lib: Path) -> bool:
    """Does this python's zlib module load ``lib``?  (It dlopen()s zlib.cpython-*.so, which needs libz.so.1.)"""
    code = "import zlib\nfor l in open('/proc/self/maps'):\n    print(l.split()[-1])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split()
    return any(p.startswith("/") and os.path.exists(p) and os.path.samefile(p, lib) for p in out)


def test_zlib_every_eligible_instruction_matches_callgrind(gcc, valgrind, zlib):
    """All of libz's eligible instructions probed during a real round trip; every count equal to callgrind's."""
    from generator.image.elf import KernelImage
    from generator.analysis.probes import analyse

    res = run(zlib, [sys.executable, FIXTURES / "zlib_roundtrip.py", "1"], verify=True, timeout=300)
    print(summary(res))
    assert_proved(res)
    # Every eligible instruction: the table holds every "ok" probe of every eligible function.
    img = KernelImage.open(str(zlib))
    reports = [analyse(img, f) for f in img.functions()]
    ok = sum(1 for r in reports if r.eligible for p in r.probes if p.status == "ok")
    assert res.tabled == ok
    assert res.functions == sum(1 for r in reports if r.eligible and any(p.status == "ok" for p in r.probes))
    by_kind = res.hits_by_kind()
    for kind in ("trampoline", "riprel", "jmp-rel32", "jcc-rel32", "jmp-widen", "jcc-widen",
                 "call-direct", "call-reg", "call-mem"):
        assert by_kind.get(kind, 0) > 0, kind
    assert sum(res.hits) > 1_000_000
    assert res.probed.seconds < 60


# -- kernel-style fixtures: every class ------------------------------------------------------


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_fixture_every_class_matches_callgrind(cc, gcc, valgrind):
    """Each compiler's build of the fixture hits every emulation class, jcc both ways, all counts equal."""
    path = require_tool(cc, cc, "the fixture is built with it") if cc != "gcc" else gcc
    fx = build_fixture(path)
    res = run(fx["lib"], [fx["linked"], 300], verify=True)
    print(cc, summary(res))
    assert_proved(res)
    by_kind = res.hits_by_kind()
    missing = [k for k in ALL_KINDS if not by_kind.get(k)]
    assert not missing, f"classes never hit: {missing}"
    # Conditional branches both ways, through a widened rel8 and a rel32.
    jcc = res.verify["jcc"]
    for kind in ("jcc-widen", "jcc-rel32"):
        both = [p for p, j in jcc.items() if j["kind"] == kind and 0 < j["taken"] < j["executed"]]
        assert both, f"no {kind} probe went both ways"
    # The planted encodings were probed and ran (and, above, counted right).
    from generator.run.harness import build

    b = build(str(fx["lib"]), all_functions=True)
    img = KernelImage.open(str(fx["lib"]))
    hit_bytes = [img.read(b.link_address(i), p.length).hex() for i, (p, n) in enumerate(zip(b.probes, res.hits)) if n]
    for prefix, what in PLANTED.items():
        assert any(h.startswith(prefix) for h in hit_bytes), f"{what} ({prefix}) not probed or never ran"


def test_dlopen_library_is_patched_as_it_maps(kfix, valgrind):
    """A library dlopen()ed after main() started: probes placed at la_objopen, counts equal to callgrind's."""
    res = run(kfix["lib"], [kfix["dlopen"], 200, kfix["lib"]], verify=True)
    assert_proved(res)
    # The locate run under valgrind found the library too (preloaded, at exit).
    assert any(res.verify["load_biases"].values())
    assert res.plain.stdout.startswith(b"kfix rounds=200 ")


def test_program_itself_as_target(kfix, valgrind):
    """The program (ET_EXEC, bias 0) as the target: patched before main(), counts equal to callgrind's."""
    res = run(kfix["linked"], [kfix["linked"], 100], verify=True)
    assert_proved(res)
    assert res.hits_by_kind().get("call-reg", 0) > 0  # main_mix's call through main_ops[]


def build_module_and_program(cc: str) -> Dict[str, Path]:
    """The fixture's code two ways: a ``.ko``-style ``ld -r`` object, and linked into a program.

    Both come from the same kernel-style objects (non-PIC, as an amd64 kernel
    module is compiled).  The module is kfix.o alone: kfix_asm.o plays the
    kernel, so each call into it stays an unresolved relocation in the module
    (``e8 00 00 00 00``, as a module's calls to kernel functions are) and is a
    final displacement in the program, where everything sits at other addresses.
    """
    out = FIXTURE_BUILD / f"{Path(cc).name}-module"
    out.mkdir(parents=True, exist_ok=True)
    objs = [out / "kfix.o", out / "kfix_asm.o"]
    ko, prog = out / "kfix.ko", out / "kfix_program"
    steps = [
        [cc, *KFLAGS, "-fno-pic", "-c", "-o", str(objs[0]), str(FIXTURES / "kfix.c")],
        [cc, *KFLAGS, "-fno-pic", "-c", "-o", str(objs[1]), str(FIXTURES / "kfix_asm.S")],
        ["ld", "-r", "-o", str(ko), str(objs[0])],
        [cc, *KFLAGS, "-fno-pic", "-no-pie", "-Wl,-Ttext-segment=0x800000", "-o", str(prog),
         str(FIXTURES / "kfix_main.c"), *map(str, objs)],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return {"ko": ko, "program": prog}


def test_table_from_a_module_object_probes_the_same_code_linked_elsewhere(gcc, valgrind):
    """A table made from an ``ld -r`` module, placed by name and size in a program built from the same
    objects: every eligible instruction probed, output identical, every count equal to callgrind's, and
    the probes whose bytes a relocation fills (zero in the module) among those that ran."""
    require_tool("ld", "binutils", "it combines the objects the way a .ko is made")
    fx = build_module_and_program(gcc)
    res = run(fx["program"], [fx["program"], 200], table_from=str(fx["ko"]), verify=True)
    print(summary(res))
    assert_proved(res)
    assert res.notes == [], res.notes

    from generator.run.harness import build

    b = build(str(fx["program"]), all_functions=True, table_from=str(fx["ko"]))
    ko, prog = KernelImage.open(str(fx["ko"])), KernelImage.open(str(fx["program"]))
    assert ko.e_type == "ET_REL" and prog.e_type == "ET_EXEC"
    assert any(not r.resolved for r in ko.relocations()), "the module must call outside itself"
    moved, external, differ = 0, set(), set()
    for i, (p, n) in enumerate(zip(b.probes, res.hits)):
        table_at, live_at = b.plan.link_address(p), b.link_address(i)
        moved += table_at != live_at
        fields = ko.relocs_in(table_at, p.length)
        if not n or not fields:
            continue
        if ko.read(table_at, p.length) != prog.read(live_at, p.length):
            differ.add(p.kind)
        if any(not r.resolved for r in fields):
            external.add(p.kind)
    assert moved == len(b.probes), "the program must hold the functions at other addresses than the module"
    # A call into "the kernel", zero in the module, ran through its probe; so did
    # RIP-relative data references whose displacement the program's layout changed.
    assert "call-direct" in external, external
    assert {"call-direct", "riprel"} <= differ, differ


def test_forked_child_counts_in_the_parents_file(valgrind, gcc, zlib):
    """A child that fork()s off and leaves with _exit() (no destructors) still has every hit counted."""
    code = (
        "import os, zlib\nd = bytes(range(256)) * 40\nprint(len(zlib.compress(d)))\npid = os.fork()\n"
        "if pid == 0:\n    print('child', len(zlib.compress(d * 2, 9)), flush=True)\n    os._exit(0)\n"
        "os.waitpid(pid, 0)\nprint('parent', len(zlib.compress(d, 1)))\n"
    )
    res = run(zlib, [sys.executable, "-c", code], verify=True)
    assert_proved(res)
    assert b"child" in res.plain.stdout


def test_same_run_twice_gives_same_counts(kfix):
    a = run(kfix["lib"], [kfix["linked"], 50])
    b = run(kfix["lib"], [kfix["linked"], 50])
    assert a.ok and b.ok and a.hits == b.hits and sum(a.hits) > 0


# -- traps that are not ours --------------------------------------------------------------------


def test_foreign_trap_with_default_action_still_kills(kfix):
    """The program's own int3, not a probe: passed on, so the probed run dies of SIGTRAP like the plain one."""
    res = run(kfix["lib"], [kfix["linked"], 20, "int3"])
    assert res.plain.status == -5  # SIGTRAP
    assert res.identical and res.ok, res.differences


def test_foreign_trap_reaches_the_programs_handler(kfix):
    """The program installed a SIGTRAP handler before the library (and ours) arrived: it still gets its trap."""
    res = run(kfix["lib"], [kfix["dlopen"], 20, kfix["lib"], "int3"])
    assert b"after int3: caught 1" in res.plain.stdout
    assert res.identical and res.ok, res.differences
    assert sum(res.hits) > 0


# -- negative tests: the comparison can fail -----------------------------------------------------


def _probe(plan, func: str, prefix: str):
    """The first probe of ``func`` whose instruction bytes start with ``prefix`` (hex)."""
    img = KernelImage.open(plan.image)
    for p in plan.probes():
        if plan.funcs[p.func].name == func and img.read(plan.link_address(p), p.length).hex().startswith(prefix):
            return p
    raise AssertionError(f"no {prefix} in {func}")


def _with_record(plan, probe, kind=None, length=None):
    """The plan with one instruction's record rewritten: another kind or another length."""
    from generator.isa import by_name

    isa = by_name(plan.arch)
    f = plan.funcs[probe.func]
    out = b""
    for insn in isa.stream_decode(f.records, None):
        if insn.offset == probe.offset:
            insn = insn._replace(kind=kind or insn.kind, length=length or insn.length)
        out += isa.stream_record(insn.length, insn.kind, insn.dispoff, insn.masks)
    funcs = list(plan.funcs)
    funcs[probe.func] = f._replace(records=out)
    return dataclasses.replace(plan, funcs=tuple(funcs))


def test_a_call_recorded_as_a_plain_instruction_is_refused(kfix):
    """call rel32 run from the trampoline would reach the wrong place: the core derives the live instruction's
    kind with the one rule (kinst_core_dissect()) and refuses the record that says otherwise, with why."""
    from generator.providers.kinst.generate import build_plan

    plan = build_plan(KernelImage.open(str(kfix["lib"])), [], True)
    p = _probe(plan, "kfix_asm_calls", "e8")
    res = run(kfix["lib"], [kfix["linked"], 50], plan=_with_record(plan, p, kind="trampoline"), timeout=60)
    assert res.identical and not res.errors
    assert res.refused == [{"probe": plan.probe_name(p),
                            "reason": f"the record of kfix_asm_calls:{p.offset} contradicts the live instruction"}]


def test_a_wrong_length_makes_the_run_fail(kfix):
    """One record a byte short: every later probe of the function lands inside an instruction."""
    from generator.providers.kinst.generate import build_plan

    plan = build_plan(KernelImage.open(str(kfix["lib"])), [], True)
    p = _probe(plan, "kfix_leaf", "488d447f01")
    res = run(kfix["lib"], [kfix["linked"], 50], plan=_with_record(plan, p, length=p.length - 1), timeout=60)
    assert not res.ok


def test_a_record_that_contradicts_the_bytes_is_refused(kfix):
    """A direct call recorded as a jmp rel32: the core checks the opcode and refuses that probe, with why."""
    from generator.providers.kinst.generate import build_plan

    plan = build_plan(KernelImage.open(str(kfix["lib"])), [], True)
    p = _probe(plan, "kfix_asm_calls", "e8")
    res = run(kfix["lib"], [kfix["linked"], 50], plan=_with_record(plan, p, kind="jmp-rel32"))
    assert res.identical and not res.errors
    assert res.refused == [{"probe": plan.probe_name(p),
                            "reason": f"the record of kfix_asm_calls:{p.offset} contradicts the live instruction"}]
    assert res.placed == res.tabled - 1


def test_a_digest_mismatch_skips_the_function_and_names_it(kfix):
    """The table's digest of kfix_leaf is off by one: its probes are refused, the rest still run."""
    from generator.providers.kinst.generate import build_plan

    plan = build_plan(KernelImage.open(str(kfix["lib"])), [], True)
    fi = next(i for i, f in enumerate(plan.funcs) if f.name == "kfix_leaf")
    funcs = list(plan.funcs)
    funcs[fi] = funcs[fi]._replace(digest=funcs[fi].digest ^ 1)
    res = run(kfix["lib"], [kfix["linked"], 50], plan=dataclasses.replace(plan, funcs=tuple(funcs)))
    assert res.identical and not res.errors
    reasons = {r["reason"] for r in res.refused}
    assert reasons == {"digest: the live bytes of kfix_leaf differ from the table's"}
    assert len(res.refused) == plan.funcs[fi].probes
    assert res.placed == res.tabled - plan.funcs[fi].probes and sum(res.hits) > 0


def test_output_that_differs_between_runs_fails(kfix):
    res = run(kfix["lib"], [sys.executable, "-c", "import os; print(os.getpid())"])
    assert not res.identical and not res.ok
    assert res.differences == [res.differences[0]] and res.differences[0].startswith("stdout differs")
    assert any("never mapped" in e for e in res.errors)


def test_a_library_never_mapped_is_said_plainly(kfix, valgrind, gcc, tmp_path, capsys):
    """A statically linked program never loads the library: the report says so, and does not present
    callgrind's empty counts as a comparison ("0 of N probes DIFFER")."""
    from generator.cli.harness import cmd_harness

    (tmp_path / "static.c").write_text("int main(void) { return 0; }\n")
    prog = tmp_path / "static"
    proc = subprocess.run([gcc, "-static", str(tmp_path / "static.c"), "-o", str(prog)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"gcc -static failed (no static libc: apt-get install libc6-dev): {proc.stderr.strip()[:200]}")
    args = _cli(["harness", "--elf", str(kfix["lib"]), "--all", "--verify", "--", str(prog)])
    assert cmd_harness(args) == 1
    lines = capsys.readouterr().out.splitlines()
    assert f"error: {kfix['lib']} was never mapped by the command: no process loaded it (a statically linked " \
           "program never does), so nothing was probed" in lines
    assert f"callgrind: not run: {kfix['lib']} was never mapped, so there is nothing to count" in lines
    assert not any("DIFFER" in ln for ln in lines)
    assert lines[-1] == f"FAIL: {kfix['lib']} was never mapped by the command; run a program that loads it"


# -- the command line and bad input --------------------------------------------------------------


def _cli(argv: List[str]) -> argparse.Namespace:
    from generator.cli import make_parser

    return make_parser().parse_args(argv)


def test_cli_json(kfix, capsys):
    from generator.cli.harness import cmd_harness

    args = _cli(["harness", "--elf", str(kfix["lib"]), "--function", "kfix_asm_calls", "--json", "--",
                 str(kfix["linked"]), "30"])
    assert cmd_harness(args) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["identical"] and obj["ok"] and obj["placed"] == obj["probes"] > 0
    assert obj["hits"] == sum(obj["hits_by_kind"].values()) > 0
    assert obj["hits_by_kind"]["call-mem"] > 0 and obj["refused"] == []
    assert obj["command"] == [str(kfix["linked"]), "30"]


def test_cli_fails_when_runs_differ(kfix, capsys):
    from generator.cli.harness import cmd_harness

    args = _cli(["harness", "--elf", str(kfix["lib"]), "--all", "--", sys.executable, "-c",
                 "import os; print(os.getpid())"])
    assert cmd_harness(args) == 1
    out = capsys.readouterr().out
    assert "runs DIFFER" in out and out.splitlines()[-1].startswith("FAIL")


@pytest.mark.parametrize(
    "elf, command, match",
    [
        ("/nonexistent/libnothing.so", ["true"], "no such file"),
        (None, [], "no command"),
    ],
)
def test_bad_input_is_one_line(kfix, elf, command, match):
    from generator.run.harness import run_harness

    with pytest.raises(UserError, match=match) as e:
        run_harness(elf or str(kfix["lib"]), command, all_functions=True)
    assert "\n" not in str(e.value)


def test_relocatable_object_is_refused(tmp_path, gcc):
    obj = tmp_path / "k.o"
    subprocess.run([gcc, "-c", "-o", str(obj), str(FIXTURES / "kfix_asm.S")], check=True)
    from generator.run.harness import run_harness

    with pytest.raises(UserError, match="cannot be loaded in user space"):
        run_harness(str(obj), ["true"], all_functions=True)


def test_missing_gcc_is_one_line(kfix, monkeypatch):
    from generator.run.harness import run_harness

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UserError, match="gcc not found"):
        run_harness(str(kfix["lib"]), ["true"], all_functions=True)


def test_missing_valgrind_is_one_line(kfix, monkeypatch):
    from generator.run.harness import run_harness

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "valgrind" else real(name, *a, **k))
    with pytest.raises(UserError, match="valgrind not found"):
        run_harness(str(kfix["lib"]), ["true"], all_functions=True, verify=True)


# -- the library itself ------------------------------------------------------------------------------


def _reached(lib: Path, root: str) -> set:
    """The functions ``root`` reaches by direct calls and jumps in ``lib``, asserting none is a PLT entry and
    no indirect call is made but kh_pass_on's (handing a foreign trap to the previous handler)."""
    objdump = require_tool("objdump", "binutils", "the check disassembles the library")
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True).stdout
    bodies: Dict[str, List[str]] = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if m:
            cur = m.group(1)
            bodies[cur] = []
        elif cur and "\t" in line:
            bodies[cur].append(line.split("\t", 1)[1])
    seen, todo = set(), [root]
    while todo:
        fn = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        assert fn in bodies, f"{fn} not found in {lib}"
        for insn in bodies[fn]:
            if not insn.startswith(("call", "jmp")):
                continue
            if "<" not in insn:
                assert not insn.startswith("call") or fn == "kh_pass_on", f"{fn}: {insn!r} in probe context"
                continue
            target = insn.split("<", 1)[1].rstrip(">").split("+")[0]
            assert "@plt" not in target, f"{fn} reaches {target} from probe context"
            if target != fn:
                todo.append(target)
    return seen


def test_handler_calls_nothing_but_the_core(kfix):
    """Probe context: the SIGTRAP handler reaches only the core and raw syscalls, never a PLT (libc, rtld)."""
    from generator.run.harness import build

    seen = _reached(build(str(kfix["lib"]), all_functions=True).lib, "kh_isa_trap")
    assert {"kh_isa_trap", "kh_probe_at", "kh_pass_on", "kinst_core_call", "kinst_core_is_call"} <= seen, seen


def test_jump_handler_calls_nothing_but_the_core(kfix):
    """The detour's handler is probe context too: no PLT, no indirect call; it reaches kh_hit() as the trap's does."""
    from generator.run.harness import build

    seen = _reached(build(str(kfix["lib"]), all_functions=True, jump=True).lib, "kh_jump_hit")
    assert "kh_hit" in seen and "kh_probe_at" not in seen, seen


def test_rendered_sources_are_deterministic(kfix, tmp_path):
    from generator.run.harness import build, command_line, glue_context, layout
    from generator.providers.kinst.generate import CORE_TEMPLATES, render_plan
    from generator.render import Input, render_tree

    b = build(str(kfix["lib"]), all_functions=True)
    cmd = command_line(str(kfix["lib"]), [], True)
    render_plan(b.plan, tmp_path, cmd, only=CORE_TEMPLATES)
    inputs = [Input(b.plan.image, b.plan.build_id, b.plan.sha256)]
    ctx = glue_context(str(kfix["lib"]), layout(KernelImage.open(str(kfix["lib"]))), b.target_addr)
    render_tree("harness", tmp_path, ctx, inputs, cmd)
    rendered = sorted(p.name for p in tmp_path.iterdir())
    assert rendered == ["kinst_encoding.h", "kinst_harness_target.c", "kinst_refused.txt", "kinst_table.c"]
    for name in rendered:
        assert (tmp_path / name).read_bytes() == (b.dir / name).read_bytes(), name


def test_library_is_built_from_the_hand_written_core_and_glue(kfix, tmp_path, monkeypatch):
    """The build compiles the module's own core and the harness glue, copied unchanged beside the rendered
    files (so that every #include finds this build's), and a change to either is a new build directory
    (the cache key covers them)."""
    from generator.common.paths import SYS_MODULES
    from generator.run import harness
    from generator.run.harness import build

    b = build(str(kfix["lib"]), all_functions=True)
    line = (b.dir / "commands.sh").read_text().splitlines()[-1]
    core = SYS_MODULES / "kinst" / "amd64" / "kinst_core.c"
    glue = harness.GLUE_DIR / "kinst_harness.c"
    for name in ("kinst_core.c", "kinst_harness.c", "kh_isa_amd64.c", "kinst_funcs.c", "kinst_table.c",
                 "kinst_harness_target.c"):
        assert f" {name}" in line, name
    assert (b.dir / "kinst_core.c").read_bytes() == core.read_bytes()
    assert (b.dir / "kinst_harness.c").read_bytes() == glue.read_bytes()
    # The same inputs with a copy of the hand-written glue that differs in a comment: another key.
    copy = tmp_path / "harness_c"
    shutil.copytree(harness.GLUE_DIR, copy)
    with open(copy / "kinst_harness.c", "a") as f:
        f.write("/* changed */\n")
    monkeypatch.setattr(harness, "GLUE_DIR", copy)
    again = build(str(kfix["lib"]), all_functions=True)
    assert again.dir != b.dir and again.lib.exists()
    assert (again.dir / "kinst_harness.c").read_bytes().endswith(b"/* changed */\n")


# -- the benchmark and more real code -------------------------------------------------------------


def test_bench_harness_smoke(tmp_path, gcc):
    """bench_harness() runs end to end (tiny sizes) and writes its two files."""
    from generator.bench.harness import bench_harness

    r = bench_harness(tmp_path, calls=2000, repeat=1)
    assert r["floor"]["us_per_hit"] > 0 and set(r["harness"]) == {"hot_lea", "hot_call"}
    assert all(v["hits"] == 5 * 2000 for v in r["harness"].values())
    assert json.loads((tmp_path / "harness.json").read_text())["ratio"] == r["ratio"]
    assert "bare SIGTRAP" in (tmp_path / "harness.md").read_text()
    j = r["jump"]
    assert {k: v["hits"] for k, v in j["runs"].items()} == {"breakpoint": 5 * 2000, "jump": 5 * 2000}
    assert 0 < j["jump_over_breakpoint"] < 1 and "## Jump probes" in (tmp_path / "harness.md").read_text()


@pytest.mark.slow
def test_libcrypto_every_eligible_instruction_matches_callgrind(valgrind, gcc, monkeypatch):
    """169k probes over libcrypto while hashlib runs; OPENSSL_ia32cap=0:0 so valgrind's CPUID takes the same paths."""
    lib = require_system_library("libcrypto.so.3")
    monkeypatch.setenv("OPENSSL_ia32cap", "0:0")
    code = ("import hashlib, hmac; d = bytes(range(256)) * 64; print(hashlib.sha256(d).hexdigest(), "
            "hashlib.md5(d).hexdigest(), hashlib.sha512(d).hexdigest()[:16], hmac.new(b'k', d, 'sha1').hexdigest())")
    res = run(lib, [sys.executable, "-c", code], verify=True)
    if not res.processes:
        missing(f"{sys.executable}'s hashlib does not load {lib}")
    print(summary(res))
    assert_proved(res)


# -- jump probes (harness --jump, issue 22) -------------------------------------------------------


def assert_jumped(res) -> dict:
    """A --jump run placed jumps and breakpoints both, and accounts for every placed probe."""
    j = res.to_json()
    assert j["jump_sites"] > 0 and j["jump_probes"] >= j["jump_sites"]
    assert j["trap_probes"] > 0 and j["jump_probes"] + j["trap_probes"] == j["placed"]
    assert j["jump_plan"]["probes"] == j["jump_probes"] and j["jump_plan"]["sites"] == j["jump_sites"]
    assert sum(j["jump_plan"]["trap_reasons"].values()) == j["trap_probes"]
    return j


def test_jump_fixture_every_class_matches_callgrind(kfix, valgrind):
    """--jump over every probe of the fixture: identical output, every count (jump and breakpoint) callgrind's,
    and the instructions a detour displaced and ran include every class the fixture plants."""
    from generator.run.harness import build

    res = run(kfix["lib"], [kfix["linked"], 300], verify=True, jump=True)
    print(summary(res), json.dumps({k: v for k, v in res.to_json().items() if k.startswith("jump")}))
    assert_proved(res)
    assert_jumped(res)
    fires = build(str(kfix["lib"]), all_functions=True, jump=True).jump.fires
    in_detour = set()
    for head, n in enumerate(fires):
        in_detour.update(range(head, head + n))
    kinds = {res.kinds[i] for i in in_detour if res.hits[i]}
    # Calls other than direct ones never run displaced (JumpFacts.detour_calls); the rest all did.
    assert kinds >= set(ALL_KINDS) - {"call-reg", "call-mem", "call-riprel"}, sorted(kinds)
    assert any(n > 1 and res.hits[h + n - 1] for h, n in enumerate(fires)), "no detour ran a displaced probe"


def test_jump_zlib_matches_callgrind(gcc, valgrind, zlib):
    """--jump over all of libz during a real round trip: identical output and callgrind-equal counts."""
    res = run(zlib, [sys.executable, FIXTURES / "zlib_roundtrip.py", "1"], verify=True, timeout=300, jump=True)
    print(summary(res), json.dumps({k: v for k, v in res.to_json().items() if k.startswith("jump")}))
    assert_proved(res)
    j = assert_jumped(res)
    assert j["jump_probes"] > 0.9 * j["placed"]


def test_jumps_are_in_the_text(kfix, tmp_path):
    """Read back from the live process: each head starts with jmp rel32 into the copy's detour block, each other
    probe with int3, and a probe a detour displaces keeps its original bytes after the jump's five."""
    from generator.run.audit import audit_env, read_dumps
    from generator.run.harness import build

    b = build(str(kfix["lib"]), all_functions=True, jump=True)
    img = KernelImage.open(str(kfix["lib"]))
    code = ("import ctypes, sys\nctypes.CDLL(sys.argv[1])\nlib = sys.argv[1].encode()\n"
            "base = min(int(l.split()[0].split(b'-')[0], 16) for l in open('/proc/self/maps', 'rb') "
            "if l.rstrip().endswith(lib))\nmem = open('/proc/self/mem', 'rb')\n"
            "for a in sys.argv[2:]:\n    mem.seek(base + int(a))\n    print(mem.read(16).hex())\n")
    addrs = [b.link_address(i) for i in range(len(b.probes))]
    prefix = tmp_path / "hits"
    proc = subprocess.run([sys.executable, "-c", code, str(kfix["lib"]), *map(str, addrs)],
                          env=audit_env(b.lib, prefix, "probe"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    live = [bytes.fromhex(h) for h in proc.stdout.split()]
    (dump,) = [d for d in read_dumps(prefix) if d.mode == "probe"]
    tramp, n = dump.instances[0]["tramp"], len(b.probes)
    base = dump.instances[0]["bias"]
    covered = set()
    for i, k in enumerate(b.jump.fires):
        if not k:
            continue
        covered.update(range(i + 1, i + k))
        assert live[i][0] == 0xE9, (b.probe_name(i), live[i].hex())
        dest = base + addrs[i] + 5 + int.from_bytes(live[i][1:5], "little", signed=True)
        assert tramp + 32 * n <= dest < tramp + 32 * n + 192 * n, b.probe_name(i)
    for i in range(n):
        if b.jump.fires[i] or i in covered:
            continue
        assert live[i][0] == 0xCC, (b.probe_name(i), live[i].hex())
    for i in covered:
        head = max(h for h in range(i) if b.jump.fires[h] and h + b.jump.fires[h] > i)
        skip = addrs[head] + 5 - addrs[i]  # bytes of this instruction under the jump
        orig = img.read(addrs[i], b.probes[i].length)
        assert skip > 0 and live[i][skip:b.probes[i].length] == orig[skip:], b.probe_name(i)


def test_jump_placement_follows_the_proof(kfix):
    """Heads are proven sites, windows do not overlap, cover the jump and end in no call the detour cannot run;
    every other probe is counted once under a reason."""
    from generator.analysis import jumpreport
    from generator.run.harness import build
    from generator.common.defaults import DEFAULT_PROLOGUE_RULE

    b = build(str(kfix["lib"]), all_functions=True, jump=True)
    img = KernelImage.open(str(kfix["lib"]))
    fires, probes = b.jump.fires, b.probes
    proven = set()
    for fi, pf in enumerate(b.plan.funcs):
        func = next(f for f in img.functions() if (f.name, f.address) == (pf.name, pf.address))
        proven |= {(fi, v.offset) for v in jumpreport.of_function(img, func, DEFAULT_PROLOGUE_RULE).verdicts if not v.code}
    end = -1
    for i, k in enumerate(fires):
        if not k:
            continue
        p, last = probes[i], probes[i + k - 1]
        assert (p.func, p.offset) in proven and p.index > end
        assert all(probes[i + j].func == p.func for j in range(k))
        assert last.offset < p.offset + 5 <= last.offset + last.length
        assert not last.kind.startswith("call") or last.kind in img.isa.jump.detour_calls
        end = i + k - 1
    assert b.jump.jumped == sum(fires) and b.jump.heads == sum(1 for k in fires if k)
    assert sum(b.jump.traps.values()) + b.jump.jumped == len(probes)
    assert b.jump.traps.get("call-kind", 0) > 0  # the fixture's call *%r12 and kin sit in proven windows


def test_jump_json_and_default_output(kfix, capsys):
    """--jump adds its counts to --json; the default run's JSON has none of them."""
    from generator.cli.harness import cmd_harness

    base = ["harness", "--elf", str(kfix["lib"]), "--function", "kfix_asm_calls", "--json", "--", str(kfix["linked"]),
            "30"]
    assert cmd_harness(_cli(base)) == 0
    plain = json.loads(capsys.readouterr().out)
    assert not [k for k in plain if k.startswith("jump") or k == "trap_probes"]
    assert cmd_harness(_cli(base[:1] + ["--jump"] + base[1:])) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["ok"] and obj["jump_probes"] > 0 and obj["jump_probes"] + obj["trap_probes"] == obj["placed"]
    assert obj["hits"] == plain["hits"] and obj["hits_by_kind"] == plain["hits_by_kind"]


def test_jump_with_table_from_is_one_line(kfix):
    with pytest.raises(UserError, match="--jump with --table-from"):
        run(kfix["lib"], ["true"], jump=True, table_from=str(kfix["lib"]))
