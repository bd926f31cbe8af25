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

import json
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from generator.analysis import jumpsafe as J
from generator.analysis.probes import analyse, function_code
from generator.common.paths import BUILD
from generator.image.elf import KernelImage
from helpers.paths import REPO
from helpers.skips import require_system_library, require_tool

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
    fc = J.from_report(rep, function_code(img, func), img.isa.jump)
    return func, fc, {v.offset: v for v in J.prove(img, func, fc)}


def _run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(path)], capture_output=True, text=True, timeout=30)


def _detour(img: KernelImage, fc: J.FuncCode, func_addr: int, start: int, at: int) -> bytes:
    """The displaced instructions from ``start`` (at least 5 bytes of them), relocated to ``at``, then a
    jump back.  The fixtures' displaced instructions are position-independent, but for a call through a
    register, which is emulated: its original return address pushed, then a jump through the register."""
    code = bytearray()
    end = start
    for off, length, call in zip(fc.offsets.tolist(), fc.lengths.tolist(), fc.call.tolist()):
        if off < start or end >= start + 5:
            continue
        b = img.read(func_addr + off, length)
        if call:
            assert b[0] == 0xFF and b[1] >> 6 == 3, b.hex()  # ff /2, a register: the only call planted
            code += b"\x68" + struct.pack("<i", func_addr + off + length)  # push $return (non-PIE)
            code += bytes((0xFF, (b[1] & ~0x38) | 0x20))  # jmp *%reg: ff /4
        else:
            code += b
        end = off + length
    code += b"\xe9" + struct.pack("<i", func_addr + end - (at + len(code) + 5))
    assert len(code) <= _DETOUR_SLOT
    return bytes(code)


def _patched(program: Path, site: str, slot: int) -> Path:
    """A copy of the program with a jump at ``site`` to a detour in jf_detour's slot ``slot``."""
    img = KernelImage.open(str(program))
    syms = _symbols(img)
    fname, _ = SITES[site]
    func, fc, _ = _verdicts(img, fname)
    start = syms[site] - func.address
    at = syms["jf_detour"] + slot * _DETOUR_SLOT
    detour = _detour(img, fc, func.address, start, at)
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


def test_linux_exception_table_sites_and_fixups_are_held(tmp_path):
    """A module's ``__ex_table`` (an object file, its entries relocations against .text): a jump may not
    displace the instruction that may fault, nor cover its fixup; nor displace a site the kernel rewrites."""
    gcc = require_tool("gcc", "gcc", "assembles the exception-table fixture")
    obj = tmp_path / "jfx.o"
    subprocess.run([gcc, "-c", "-o", str(obj), str(FIXTURES / "jf_extable.S")], check=True)
    img = KernelImage.open(str(obj))
    func, _, verdicts = _verdicts(img, "jf_copy")
    syms = {s.name: s.value for s in img.symbols() if s.name.startswith("jf_site")}  # offsets in .text
    fault, fixup = syms["jf_site_fault"], syms["jf_site_fixup"]
    assert verdicts[fault].code == "held" and "__ex_table" in verdicts[fault].reason
    assert verdicts[fixup].code == "branch-into" and "fixup" in verdicts[fixup].reason
    # The instruction after the faulting one is not displaced by a jump there, and passes.
    assert verdicts[fault + 2].code == ""
    # Sites the kernel rewrites, from tables of three layouts: each refuses the jumps that would displace it.
    func, _, verdicts = _verdicts(img, "jf_patched")
    values = {s.name: s.value for s in img.symbols()}  # offsets in .text (an object file)
    syms = {n: v - values["jf_patched"] for n, v in values.items() if n.startswith("jf_site")}
    for site, table in (("jf_site_lock", ".smp_locks"), ("jf_site_mcount", "__mcount_loc"),
                        ("jf_site_alt", ".altinstructions")):
        v = verdicts[syms[site]]
        assert v.code == "held" and f"({table})" in v.reason, (site, v)
    assert verdicts[syms["jf_site_alt"] + 5].code == ""  # after the alternative's 5 bytes


def test_proven_sites_against_objdump(tmp_path):
    """Independent oracle: over every function of the machine's libstdc++, no direct branch or
    %rip-relative reference objdump decodes lands strictly inside a jump the proof passed, and no call
    objdump decodes returns inside one."""
    objdump = require_tool("objdump", "binutils", "decodes libstdc++ independently of capstone")
    lib = require_system_library("libstdc++.so.6")
    from generator.analysis import jumpreport

    img = KernelImage.open(str(lib))
    inside = {}  # address strictly inside a proven jump -> its site
    total = proven = 0
    for chunk in jumpreport.of_image(img, "any", 1):
        for fj in chunk:
            for v in fj.verdicts:
                total += 1
                if not v.code:
                    proven += 1
                    for b in range(1, img.isa.jump.size):
                        inside[fj.address + v.offset + b] = f"{fj.function}:{v.offset}"
    assert total > 100_000 and proven / total > 0.7, (proven, total)
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", "-w", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    lines = re.compile(r"^ *([0-9a-f]+):\t(\S+)(?:\s+(.*))?$", re.M)
    bad = []
    prev_call_end = None
    for m in lines.finditer(out):
        addr, mnem, ops = int(m.group(1), 16), m.group(2), m.group(3) or ""
        if prev_call_end is not None and addr in inside:
            bad.append(f"call returning to {addr:#x} inside the jump at {inside[addr]}")
        prev_call_end = None
        if mnem.startswith("call"):
            prev_call_end = True
        ref = re.search(r"(?:^|\s|#\s*)([0-9a-f]+) <", ops)
        if ref and int(ref.group(1), 16) in inside:
            bad.append(f"{addr:#x} {mnem} {ops}: names {int(ref.group(1), 16):#x} inside the jump at "
                       f"{inside[int(ref.group(1), 16)]}")
    assert not bad, "\n".join(bad[:20])


def test_cli_jump(program):
    """``probes --jump``: text, JSON and summary views, and the combinations it refuses (exit 2, one line)."""
    run = [sys.executable, "-m", "generator", "probes", "--kernel", str(program)]
    text = subprocess.run(run + ["--function", "jf_call_inside", "--jump"], capture_output=True, text=True,
                          check=True).stdout
    assert "trap: the jump would displace the call at +9" in text and text.count("  jump\n") >= 3
    obj = json.loads(subprocess.run(run + ["--function", "jf_safe", "--jump", "--json"], capture_output=True,
                                    text=True, check=True).stdout)
    assert [p["jump"] for p in obj["probes"]][:3] == [True, True, True]
    summ = subprocess.run(run + ["--all", "--summary", "--jump", "--json"], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    recs = {r["function"]: r for r in map(json.loads, summ)}
    assert recs["jf_indirect"]["jump"] == 0 and recs["jf_indirect"]["trap_reasons"] == {"indirect-jump": recs["jf_indirect"]["probes"]} == {"indirect-jump": 12}
    assert recs["jf_call_inside"]["trap_reasons"] == {"call-inside": 2, "past-end": 2}
    for bad in (["--all", "--jump"], ["--function", "jf_safe", "--jump", "--lines"]):
        r = subprocess.run(run + bad, capture_output=True, text=True)
        assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r
