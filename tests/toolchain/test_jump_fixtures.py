"""The jump probe's safety proof on fixtures that break each condition, and why each rule is needed.

tests/fixtures/jump/ is a small program whose assembly has one function per
condition the proof refuses -- a branch into the jump, a call whose return
address lies inside it, an indirect jump whose target is computed, a jump
over the function's end, data inside the function -- each marking the site
that breaks it (``jf_site_*``), and one site the proof passes.

Each refused site is refused with its reason.  Then a jump is placed there
anyway: the test writes a detour into the program's spare code (the
displaced instructions, a call among them emulated as the trampoline rules
do -- the original return address pushed, then a jump to the callee -- and
a jump back) and patches a ``jmp rel32`` over the site.  At the safe site
the patched program prints what the original printed, so the patching is
sound; at every refused site it prints something else or dies, so the rule
that refused it is needed.

Needs gcc (the fixture).
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from generator.analysis import jumpsafe as J
from generator.analysis.probes import analyse, function_code
from generator.common.paths import BUILD
from generator.image.elf import KernelImage
from helpers.paths import REPO
from helpers.skips import require_tool

FIXTURES = REPO / "tests" / "fixtures" / "jump"
# site label -> (its function, the reason code the proof must give; "" for the safe site)
SITES = {
    "jf_site_branch": ("jf_branch_into", "branch-into"),
    "jf_site_call": ("jf_call_inside", "call-inside"),
    "jf_site_indirect": ("jf_indirect", "indirect-jump"),
    "jf_site_end": ("jf_past_end", "past-end"),
    "jf_site_data": ("jf_data", "held"),
    "jf_site_safe": ("jf_safe", ""),
}
_DETOUR_SLOT = 32  # bytes of jf_detour per site


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    gcc = require_tool("gcc", "gcc", "builds the jump-probe fixture program")
    out = tmp_path_factory.mktemp("jump") / "jf"
    subprocess.run([gcc, "-no-pie", "-O0", "-o", str(out), str(FIXTURES / "jf_main.c"), str(FIXTURES / "jf_asm.S")],
                   check=True)
    return out


def _symbols(img: KernelImage) -> Dict[str, int]:
    return {s.name: s.value for s in img.symbols() if s.name.startswith("jf_")}


def _verdicts(img: KernelImage, name: str):
    func = img.lookup(name)
    rep = analyse(img, func)
    assert rep.eligible, rep.reason
    insns = J.from_report(rep, function_code(img, func), img.isa.jump)
    return func, insns, {v.offset: v for v in J.prove(img, func, insns)}


def _run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(path)], capture_output=True, text=True, timeout=30)


def _detour(img: KernelImage, insns: List[J.JumpInsn], func_addr: int, start: int, at: int) -> bytes:
    """The displaced instructions from ``start`` (at least 5 bytes of them), relocated to ``at``, then a
    jump back.  The fixtures' displaced instructions are position-independent, but for a call through a
    register, which is emulated: its original return address pushed, then a jump through the register."""
    code = bytearray()
    end = start
    for x in insns:
        if x.offset < start or end >= start + 5:
            continue
        b = img.read(func_addr + x.offset, x.length)
        if x.kind == "call-reg":
            assert b[0] == 0xFF and b[1] >> 6 == 3, b.hex()
            code += b"\x68" + struct.pack("<i", func_addr + x.offset + x.length)  # push $return (non-PIE)
            code += bytes((0xFF, (b[1] & ~0x38) | 0x20))  # jmp *%reg: ff /4
        else:
            code += b
        end = x.offset + x.length
    back = func_addr + end
    code += b"\xe9" + struct.pack("<i", back - (at + len(code) + 5))
    assert len(code) <= _DETOUR_SLOT
    return bytes(code)


def _patched(program: Path, site: str, slot: int) -> Path:
    """A copy of the program with a jump at ``site`` to a detour in jf_detour's slot ``slot``."""
    img = KernelImage.open(str(program))
    syms = _symbols(img)
    fname, _ = SITES[site]
    func, insns, _ = _verdicts(img, fname)
    start = syms[site] - func.address
    at = syms["jf_detour"] + slot * _DETOUR_SLOT
    detour = _detour(img, insns, func.address, start, at)
    jump = b"\xe9" + struct.pack("<i", at - (syms[site] + 5))
    data = bytearray(program.read_bytes())
    for addr, blob in ((at, detour), (syms[site], jump)):
        sec = img.section_at(addr)
        data[sec.offset + addr - sec.addr : sec.offset + addr - sec.addr + len(blob)] = blob
    out = program.with_name(f"{program.name}-{site}")
    out.write_bytes(bytes(data))
    out.chmod(0o755)
    return out


def test_each_condition_is_refused_with_its_reason(program):
    img = KernelImage.open(str(program))
    syms = _symbols(img)
    for site, (fname, code) in SITES.items():
        func, _, verdicts = _verdicts(img, fname)
        v = verdicts[syms[site] - func.address]
        assert v.code == code, (site, v)
        if code:  # the text is the reason's, filled in
            assert v.reason.startswith(J.REASONS[code].split("{")[0]) and "{" not in v.reason, (site, v)
        else:
            assert v.reason == "", (site, v)


def test_a_jump_placed_anyway_breaks_the_program(program):
    """The safe site's jump changes nothing; every refused site's jump changes the output or kills the
    program: each rule refuses something that would break."""
    want = _run(program)
    assert want.returncode == 0, want.stderr
    for slot, site in enumerate(SITES):
        got = _run(_patched(program, site, slot))
        if SITES[site][1]:
            assert (got.returncode, got.stdout) != (0, want.stdout), f"{site}: the jump broke nothing"
        else:
            assert (got.returncode, got.stdout) == (0, want.stdout), f"{site}: the safe jump broke the program"
