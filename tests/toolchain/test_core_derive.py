"""The portable core derives kinst's metadata from the live bytes exactly as the generator classifies them.

A compact table keeps one small record per instruction; the template,
displacement and call operands are derived in C when a probe is made
(``sys/modules/kinst/amd64/kinst_core.c``).  Here the real core, compiled
with a generated table, walks every function of real images over the bytes
the table was made from (``tests/fixtures/kinst/derive_check.c``), and what
it derives must equal, field by field, the metadata the capstone path of
the generator computes for the same instruction (``analysis.probes``).  The
digests must match those bytes and fail on a changed byte.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from generator.analysis.plan import make_plan
from generator.analysis.probes import analyse
from generator.common.paths import SYS_MODULES
from generator.image.elf import KernelImage
from generator.providers.kinst import generate as kinst
from helpers.paths import FIXTURES
from helpers.skips import require_system_library, require_tool

CORE = [SYS_MODULES / "kinst" / n for n in ("kinst_funcs.c", "kinst_funcs.h")]
CORE += [SYS_MODULES / "kinst" / "amd64" / n for n in ("kinst_core.c", "kinst_core.h")]


def derive(image: str, tmp_path: Path, corrupt: int = -1, plan=None) -> Tuple[object, List[str]]:
    """Build derive_check with ``image``'s table (or ``plan``'s) and run it over the image's bytes (one byte
    flipped at ``corrupt``)."""
    gcc = require_tool("gcc", "gcc", "the core is compiled with it")
    img = KernelImage.open(image)
    plan = plan or make_plan(img, img.functions(), jobs=1)
    work = tmp_path / "derive"
    kinst.render_plan(plan, work, "test_core_derive", only=kinst.CORE_TEMPLATES)
    for f in CORE:
        shutil.copyfile(f, work / f.name)
    dump = bytearray(b"".join(img.read(f.address, f.size) for f in plan.funcs))
    if corrupt >= 0:
        dump[corrupt] ^= 0xFF
    (work / "funcs.bin").write_bytes(bytes(dump))
    exe = work / "derive_check"
    proc = subprocess.run([gcc, "-O1", "-Wall", "-Wextra", "-Werror", "-I", str(work), "-o", str(exe),
                           str(FIXTURES / "kinst" / "derive_check.c"), str(work / "kinst_funcs.c"),
                           str(work / "kinst_core.c"), str(work / "kinst_table.c")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(exe), str(work / "funcs.bin")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return plan, run.stdout.splitlines()


def expected(image: str, plan) -> Dict[int, Tuple]:
    """Probe index -> the generator's metadata for it, as derive_check prints it."""
    img = KernelImage.open(image)
    isa = img.isa
    byname = {f.address: f for f in img.functions()}
    out: Dict[int, Tuple] = {}
    index = 0
    for pf in plan.funcs:
        rep = analyse(img, byname[pf.address])
        for p in rep.probes:
            if p.status != "ok":
                continue
            md = p.md
            call = md.flags & 1
            out[index] = (
                p.offset, isa.kind_index(p.kind), md.flags, md.instlen, md.tinstlen,
                md.dispoff, md.disp if (call or md.flags & 4) else 0,
                md.reg1 if call else None, md.reg2 if call else None, md.scale if call else 0,
                md.template.hex() if not call else None,
            )
            index += 1
    return out


def compare(image: str, plan, lines: List[str]) -> Tuple[int, List[str]]:
    want = expected(image, plan)
    bad: List[str] = []
    seen = 0
    for line in lines:
        words = line.split()
        if words[0] == "func":
            if words[3] != "ok":
                bad.append(line)
            continue
        if words[0] != "probe":
            bad.append(line)
            continue
        idx, off = int(words[1]), int(words[2])
        if words[3] == "error":
            bad.append(f"{line} (expected {want.get(idx)})")
            continue
        kind, flags, instlen, tinstlen, dispoff, disp, reg1, reg2, scale = map(int, words[3:12])
        call = flags & 1
        got = (off, kind, flags, instlen, tinstlen, dispoff, disp if (call or flags & 4) else 0,
               reg1 if call else None, reg2 if call else None, scale if call else 0, words[12] if not call else None)
        seen += 1
        if got != want.get(idx):
            bad.append(f"probe {idx}: core {got}, generator {want.get(idx)}")
    assert seen == len(want), f"the core derived {seen} probes, the table has {len(want)}"
    return seen, bad


def test_sample_kernel(sample_kernel, tmp_path):
    plan, lines = derive(str(sample_kernel), tmp_path)
    seen, bad = compare(str(sample_kernel), plan, lines)
    assert seen > 1000 and not bad, bad[:10]


@pytest.mark.parametrize("lib", ["libz.so.1", "libcrypto.so.3"])
def test_system_library(lib, tmp_path):
    path = str(require_system_library(lib))
    plan, lines = derive(path, tmp_path)
    seen, bad = compare(path, plan, lines)
    assert seen > 5000 and not bad, bad[:10]


def test_kernel_modules(debian_modules, tmp_path):
    """Linux modules: ET_REL, every call into the kernel a relocated field the digest masks."""
    checked = 0
    for ko in debian_modules[:12]:
        plan, lines = derive(str(ko), tmp_path / ko.name)
        seen, bad = compare(str(ko), plan, lines)
        assert not bad, (ko.name, bad[:10])
        checked += seen
    assert checked > 10000


def test_a_changed_byte_fails_the_digest(sample_kernel, tmp_path):
    plan, lines = derive(str(sample_kernel), tmp_path, corrupt=3)
    funcs = [line.split() for line in lines if line.startswith("func ")]
    assert funcs[0][3] == "BAD" and all(f[3] == "ok" for f in funcs[1:])


# What the table never calls a trampoline: kinds whose displacement is relative to where the instruction
# runs, and calls (emulated).
NOT_COPYABLE = {"call-direct", "jmp32", "jcc32", "jmp-widen", "jcc-widen", "call-reg", "call-mem", "call-riprel"}


def test_a_trampoline_record_must_be_copyable(sample_kernel, tmp_path):
    """A record that says "trampoline" for a relative branch or call, or for a call through a register or
    memory (ff /2), is refused by the core (KINST_E_TABLE) though the digest agrees with it, as it would
    with a wrong generator's record: copied unchanged into a trampoline the instruction would run relative
    to the trampoline, or return there.  Every other probe is derived as before."""
    import dataclasses

    img = KernelImage.open(str(sample_kernel))
    isa = img.isa
    plan = make_plan(img, img.functions(), jobs=1)
    retagged = []
    funcs = []
    for f in plan.funcs:
        records = b""
        for insn in isa.stream_decode(f.records, f.size):
            kind = insn.kind
            if kind in NOT_COPYABLE:
                retagged.append((f.name, insn.offset))
                kind = "trampoline"
            records += isa.stream_record(insn.length, kind, insn.dispoff, insn.masks)
        funcs.append(f._replace(records=records))
    assert len(retagged) > 100
    _, lines = derive(str(sample_kernel), tmp_path, plan=dataclasses.replace(plan, funcs=tuple(funcs)))
    assert all(line.endswith(" ok") for line in lines if line.startswith("func "))
    probes = [line.split() for line in lines if line.startswith("probe ")]
    errors = [(int(w[2]), w[4]) for w in probes if w[3] == "error"]
    assert len(errors) == len(retagged) and {e for _, e in errors} == {"4"}, errors[:10]  # KINST_E_TABLE
    assert len(probes) - len(errors) == plan.nprobes - len(retagged)
