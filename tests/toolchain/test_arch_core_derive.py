"""The arm64 and riscv cores derive the emulation data from the live bytes exactly as the generator classifies them.

The compact table keeps a byte per instruction; the core derives the rest
in C when a probe is made (``sys/modules/kinst/<arch>/kinst_core.c``).  Here
the real core, compiled natively with a table generated for a foreign image
(the core is portable C and only reads bytes), walks every function over the
bytes the table was made from (``tests/fixtures/kinst/derive_check_dbp.c``)
and what it derives -- kind, word, offset, registers, condition, bit, size,
flags, the trampoline it fills -- must equal the capstone path's metadata
field by field.  A changed byte must fail the digest.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from generator.analysis.plan import make_plan
from generator.analysis.probes import analyse
from generator.image.elf import KernelImage
from generator.providers.kinst import generate as kinst
from generator.run.harness import core_sources
from helpers import cross
from helpers.paths import FIXTURES
from helpers.skips import require_tool

NONE = 0xFF  # the core's "no register / condition / bit"


def derive(image: str, arch: str, tmp_path: Path, corrupt: int = -1) -> Tuple[object, List[str]]:
    gcc = require_tool("gcc", "gcc", "the core is compiled natively for the check")
    img = KernelImage.open(image)
    plan = make_plan(img, img.functions(), jobs=1)
    work = tmp_path / "derive"
    kinst.render_plan(plan, work, "test_arch_core_derive", only=kinst.CORE_TEMPLATES)
    core = core_sources(arch)  # kinst_funcs.[ch], <arch>/kinst_core.[ch], dbp/kinst_core_dbp.[ch]
    for f in core:
        shutil.copyfile(f, work / f.name)
    dump = bytearray(b"".join(img.read(f.address, f.size) for f in plan.funcs))
    if corrupt >= 0:
        dump[corrupt] ^= 0xFF
    (work / "funcs.bin").write_bytes(bytes(dump))
    exe = work / "derive_check"
    define = ["-DKINST_TEST_RISCV"] if arch == "riscv" else []
    proc = subprocess.run([gcc, "-O1", "-Wall", "-Wextra", "-Werror", *define, "-I", str(work), "-o", str(exe),
                           str(FIXTURES / "kinst" / "derive_check_dbp.c"),
                           *(str(work / f.name) for f in core if f.suffix == ".c"), str(work / "kinst_table.c")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(exe), str(work / "funcs.bin")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return plan, run.stdout.splitlines()


def _n(v: int) -> int:
    return NONE if v == -1 else v


# A trampoline's own breakpoint: brk #0x40d on arm64 (the probes' too), ebreak on riscv (probes get c.ebreak).
TRAMP_BREAK = {"arm64": 0xD42081A0, "riscv": 0x00100073}


def expected(image: str, arch: str, plan) -> Dict[int, Tuple]:
    img = KernelImage.open(image)
    isa = img.isa
    byaddr = {f.address: f for f in img.functions()}
    out: Dict[int, Tuple] = {}
    index = 0
    for pf in plan.funcs:
        for p in analyse(img, byaddr[pf.address]).probes:
            if p.status != "ok":
                continue
            md = p.md
            tramp = "-"
            if p.kind == "trampoline":
                body = md.insn.to_bytes(p.length, "little") + (b"\x01\x00" if p.length == 2 else b"")
                tramp = (body + TRAMP_BREAK[arch].to_bytes(4, "little")).hex()
            if arch == "arm64":
                flags = (1 if md.nonzero else 0) | (2 if md.link else 0) | (4 if md.signed else 0)
                fields = (md.imm, _n(md.reg), _n(md.cond), _n(md.bit), md.size, flags)
            else:
                fields = (md.imm, md.instlen, _n(md.rd), _n(md.rs1), _n(md.rs2), _n(md.funct3))
            out[index] = (p.offset, isa.kind_index(p.kind), md.insn, *fields, tramp)
            index += 1
    return out


def compare(image: str, arch: str, plan, lines: List[str]) -> Tuple[int, List[str]]:
    want = expected(image, arch, plan)
    bad: List[str] = []
    seen = 0
    for line in lines:
        w = line.split()
        if w[0] == "func":
            if w[3] != "ok":
                bad.append(line)
            continue
        if w[0] != "probe" or w[3] == "error":
            bad.append(f"{line} (expected {want.get(int(w[1])) if len(w) > 1 else None})")
            continue
        idx = int(w[1])
        got = (int(w[2]), int(w[3]), int(w[4], 16), *map(int, w[5:11]), w[11])
        seen += 1
        if got != want.get(idx):
            bad.append(f"probe {idx}: core {got}, generator {want.get(idx)}")
    assert seen == len(want), f"the core derived {seen} probes, the table has {len(want)}"
    return seen, bad


@pytest.fixture(scope="module", params=("arm64", "riscv"))
def arch(request) -> cross.Arch:
    return cross.require_cross(request.param, "the images are cross-built")


def test_fixture_and_freebsd_module(arch, tmp_path):
    for image in (cross.kfix(arch)["lib"], cross.freebsd_module(arch.name)["kld"]):
        plan, lines = derive(str(image), arch.name, tmp_path / image.name)
        seen, bad = compare(str(image), arch.name, plan, lines)
        assert seen > 300 and not bad, bad[:10]


def test_cross_libc(arch, tmp_path):
    image = str(Path(arch.sysroot) / "lib" / "libc.so.6")
    plan, lines = derive(image, arch.name, tmp_path)
    seen, bad = compare(image, arch.name, plan, lines)
    assert seen > 50000 and not bad, bad[:10]


def test_a_changed_byte_fails_the_digest(arch, tmp_path):
    image = str(cross.kfix(arch)["lib"])
    plan, lines = derive(image, arch.name, tmp_path, corrupt=5)
    funcs = [line.split() for line in lines if line.startswith("func ")]
    assert funcs[0][3] == "BAD" and all(f[3] == "ok" for f in funcs[1:])
