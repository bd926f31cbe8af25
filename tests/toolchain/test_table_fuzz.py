"""A corrupted kinst table never gets a byte patched that is not an instruction start.

The table is data compiled into the module, trusted by nothing: at MOD_LOAD
the glue runs ``kinst_table_check()`` over its whole structure (every index
and offset in range, names in order, each function's records tiling its
bytes), and each function's digest covers its instruction records as well as
its bytes.  tests/fixtures/kinst/table_fuzz.c flips one to three random bytes
of the sample kernel's generated table, thousands of times, and does with
each copy what the module would (validate it, find each function by name,
size and address, check its digest, derive each probe); it counts a probe
made anywhere but at an instruction start of the true function, or of
another kind than the table was made with.  Built with AddressSanitizer and
UBSan, so that a read out of bounds while validating or walking a corrupted
table fails the run too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from generator.analysis.plan import make_plan
from generator.common.paths import SYS_MODULES
from generator.image.elf import KernelImage
from generator.providers.kinst import generate as kinst
from helpers.paths import KINST_FIXTURES
from helpers.skips import require_tool

MUTATIONS = 3000
CORE = [SYS_MODULES / "kinst" / n for n in ("kinst_funcs.c", "kinst_funcs.h")]
CORE += [SYS_MODULES / "kinst" / "amd64" / n for n in ("kinst_core.c", "kinst_core.h")]


def truth_lines(plan, isa) -> str:
    """Each table function, then each of its instructions with the record code it has (-1: refused)."""
    out = []
    for f in plan.funcs:
        out.append(f"F {f.address:x} {f.size:x} {f.name}")
        for insn in isa.stream_decode(f.records, f.size):
            out.append(f"S {insn.offset} {-1 if insn.kind is None else isa.kind_index(insn.kind)}")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def fuzz(sample_kernel: Path, tmp_path_factory: pytest.TempPathFactory):
    gcc = require_tool("gcc", "gcc", "the fuzz driver and the core are compiled with it, under ASan and UBSan")
    img = KernelImage.open(str(sample_kernel))
    plan = make_plan(img, img.functions(), jobs=1)
    work = tmp_path_factory.mktemp("fuzz")
    kinst.render_plan(plan, work, "test_table_fuzz", only=kinst.CORE_TEMPLATES)
    for f in CORE:
        shutil.copyfile(f, work / f.name)
    secs = [s for s in img.sections if s.size and not s.nobits]
    base = min(s.addr for s in secs)
    data = bytearray(max(s.addr + s.size for s in secs) - base)
    for s in secs:
        data[s.addr - base : s.addr + s.size - base] = img.read(s.addr, s.size)
    (work / "image").write_bytes(f"{base:x}\n".encode() + bytes(data))
    (work / "truth").write_text(truth_lines(plan, img.isa))
    exe = work / "table_fuzz"
    proc = subprocess.run([gcc, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-Wall",
                           "-Wextra", "-Werror", "-I", str(work), "-o", str(exe), str(KINST_FIXTURES / "table_fuzz.c"),
                           str(work / "kinst_funcs.c"), str(work / "kinst_core.c"), str(work / "kinst_table.c")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    blobs = kinst.table_blobs(plan)
    return exe, work, [str(len(blobs[k])) for k in ("funcs", "byname", "names")]


@pytest.mark.parametrize("seed", [1, 0x5eed])
def test_no_corruption_patches_a_byte_that_is_not_an_instruction_start(fuzz, seed: int) -> None:
    exe, work, sizes = fuzz
    run = subprocess.run([str(exe), str(work / "image"), str(work / "truth"), str(seed), str(MUTATIONS), *sizes],
                         capture_output=True, text=True, timeout=600)
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    m = re.fullmatch(r"mutations (\d+) refused-at-load (\d+) no-probes (\d+) probes (\d+) bad (\d+)", last)
    assert run.returncode == 0 and m, run.stdout[-3000:] + run.stderr[-3000:]
    assert int(m[1]) == MUTATIONS and int(m[5]) == 0
    # The structure check refuses some at load, and the rest still make (correct) probes.
    assert int(m[2]) > 0 and int(m[4]) > 0
