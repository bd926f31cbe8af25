"""Issue 20 item 2: no amd64 instruction whose trampoline copy and jump back overflow the slot.

A short jump is widened to its rel32 form in the trampoline; with its
prefixes kept (docs/refusals.md), a ``jcc rel8`` carrying 13 prefixes (15
bytes) widens to 19, past kinst's 16-byte template, and with the 14-byte
jump back past the 32-byte slot.  Past 15 bytes the widened form is no
instruction at all (an x86 instruction has at most 15; a longer one raises
#UD), so a short jump is kept only while its widened form has 15 bytes or
fewer.  With an operand-size prefix the widened rel32 form is a rel16 branch
on AMD CPUs, so that is refused too.  The generator must refuse these with a
reason, and the portable core must refuse a table record that names it
anyway: under AddressSanitizer, deriving and filling a slot of exactly
KINST_TRAMP_SIZE bytes from such a record must not write past either.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from generator.analysis import records as R
from generator.common.paths import SYS_MODULES
from generator.isa.amd64 import ISA as amd64
from helpers.paths import FIXTURES
from helpers.skips import require_tool

# jcc rel8 (je) with 13 cs prefixes, and jmp rel8 with 12 and 13: the longest short jumps there are.
JCC_13 = "2e" * 13 + "7410"
JMP_12 = "2e" * 12 + "eb10"
JMP_13 = "2e" * 13 + "eb10"
JCC_10 = "2e" * 10 + "7410"  # widens to 16 bytes: within the template, but no instruction
JCC_9 = "2e" * 9 + "7410"  # widens to 15 bytes: the longest that is an instruction
JCC_66 = "66" + "7410"  # widens to 66 0f 84 rel32: rel16 on AMD CPUs


def _classify(hexbytes: str):
    b = bytes.fromhex(hexbytes)
    insns, err = amd64.decode(b, 0x1000)
    assert err == "" and len(insns) == 1 and insns[0].length == len(b), insns
    return amd64.classify(b, 0x1000, insns[0].mnemonic, insns[0].operands)


@pytest.mark.parametrize("hexbytes", [JCC_13, JMP_12, JMP_13, "2e" * 11 + "7410", JCC_10, "2e" * 11 + "eb10"])
def test_generator_refuses_a_widening_past_the_template(hexbytes):
    v = _classify(hexbytes)
    assert v.status == R.STATUS_SKIP and v.kind == R.KIND_SKIP
    assert "15 bytes" in v.reason and "32-byte trampoline" in v.reason, v.reason


@pytest.mark.parametrize("hexbytes", [JCC_66, "66" + "eb10", "2e66" + "7510"])
def test_generator_refuses_a_widening_with_an_operand_size_prefix(hexbytes):
    v = _classify(hexbytes)
    assert v.status == R.STATUS_SKIP and v.kind == R.KIND_SKIP
    assert "operand-size prefix" in v.reason and "AMD" in v.reason, v.reason


@pytest.mark.parametrize("hexbytes,tinstlen", [(JCC_9, 15), ("2e" * 10 + "eb10", 15)])
def test_the_longest_widening_that_fits_is_kept(hexbytes, tinstlen):
    v = _classify(hexbytes)
    kind = "jcc-widen" if hexbytes.endswith("7410") else "jmp-widen"
    assert v.status == R.STATUS_OK and v.kind == kind and v.md.tinstlen == tinstlen


def _slot_check(tmp_path: Path) -> Path:
    """slot_check.c with the amd64 core, built with AddressSanitizer."""
    gcc = require_tool("gcc", "gcc", "the core is compiled with it under AddressSanitizer")
    from generator.isa.hostcore import render_encoding

    work = tmp_path / "slot"
    work.mkdir()
    render_encoding(amd64, work)
    for f in [SYS_MODULES / "kinst" / n for n in ("kinst_funcs.c", "kinst_funcs.h")] + \
             [SYS_MODULES / "kinst" / "amd64" / n for n in ("kinst_core.c", "kinst_core.h")]:
        shutil.copyfile(f, work / f.name)
    exe = work / "slot_check"
    proc = subprocess.run([gcc, "-O0", "-g", "-fsanitize=address", "-Wall", "-Wextra", "-Werror", "-I", str(work),
                           "-o", str(exe), str(FIXTURES / "kinst" / "slot_check.c"), str(work / "kinst_funcs.c"),
                           str(work / "kinst_core.c")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


@pytest.mark.parametrize("hexbytes", [JCC_13, JMP_13, JCC_10, JCC_66])
def test_core_refuses_a_record_that_would_overflow(tmp_path, hexbytes):
    exe = _slot_check(tmp_path)
    kind = amd64.kind_index("jcc-widen" if hexbytes.endswith("7410") else "jmp-widen")
    run = subprocess.run([str(exe), str(kind), hexbytes], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[:2] == ["derive", str(4)], run.stdout  # KINST_E_TABLE: the record is refused


def test_core_fills_the_longest_widening_that_fits(tmp_path):
    exe = _slot_check(tmp_path)
    run = subprocess.run([str(exe), str(amd64.kind_index("jcc-widen")), JCC_9], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["derive", "0", "fill", "0"], run.stdout
