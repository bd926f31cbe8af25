"""The ring-0 guest's reading of a real kernel: the pinned Debian 6.1 vmlinux's own tables, checked against
GNU objdump's disassembly of the same file, and the live-text image written from it.

``rules.read_rules`` reads the kernel's tables by their struct layouts; a wrong layout or a wrong base would
put the sites anywhere.  objdump, which shares nothing with it, must find at every site what the table
says is there: a jump label's jmp or nop (2 or 5 bytes), a static call's call, jmp or nop (5 bytes),
ftrace's ``call __fentry__``, a ``ud2`` for every BUG()/WARN(), an instruction boundary for every
exception-table entry, and a symbol for every NOKPROBE_SYMBOL().
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict, Tuple

import pytest

from generator.image.elf import KernelImage
from generator.run.ring0 import kernel, live, rules
from helpers.skips import missing, require_tool

_LINE = re.compile(r"^(ffffffff[0-9a-f]{8}):\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$")


@pytest.fixture(scope="module")
def vmlinux() -> KernelImage:
    from generator.common.errors import UserError

    try:
        assets = kernel.assets()
    except UserError as e:
        missing(f"the ring-0 guest's pinned Debian packages cannot be had: {e}")
    return KernelImage.open(str(assets.vmlinux))


@pytest.fixture(scope="module")
def kernel_rules(vmlinux) -> rules.KernelRules:
    return rules.read_rules(vmlinux)


@pytest.fixture(scope="module")
def objdump_at(vmlinux, kernel_rules) -> Dict[int, Tuple[int, str]]:
    """objdump's (length, text) at every rule site and function start, from one pass over .text."""
    require_tool("objdump", "binutils", "the independent disassembler the kernel's tables are checked against")
    want = set(kernel_rules.sites) | set(kernel_rules.blacklisted) | {f.address for f in vmlinux.functions()}
    out: Dict[int, Tuple[int, str]] = {}
    proc = subprocess.Popen(["objdump", "-d", "-w", "-j", ".text", vmlinux.path], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = _LINE.match(line)
        if m and int(m.group(1), 16) in want:
            out[int(m.group(1), 16)] = (len(m.group(2).split()), m.group(3).strip())
    assert proc.wait() == 0
    return out


def _sites(kr: rules.KernelRules, word: str):
    return [a for a, (_, why) in kr.sites.items() if word in why]


def test_the_tables_hold_what_objdump_finds_there(kernel_rules, objdump_at):
    kr = kernel_rules
    jumps, calls = _sites(kr, "jump-label"), _sites(kr, "static-call")
    ftrace, bugs, fixups = _sites(kr, "ftrace"), _sites(kr, "WARN() or BUG()"), _sites(kr, "__ex_table")
    assert min(len(jumps), len(calls), len(ftrace), len(bugs), len(fixups)) > 100
    for a in jumps:
        n, text = objdump_at[a]
        assert n in (2, 5) and text.split()[0].startswith(("jmp", "nop", "xchg")), (hex(a), n, text)
    for a in calls:
        n, text = objdump_at[a]
        assert n == 5 and text.split()[0].startswith(("call", "jmp", "nop")), (hex(a), n, text)
    for a in ftrace:
        assert objdump_at[a] == (5, objdump_at[a][1]) and "__fentry__" in objdump_at[a][1], hex(a)
    # A site listed by several tables keeps one reason; those left say ud2 and an instruction start.
    assert all(objdump_at[a][1].startswith("ud2") for a in bugs)
    assert all(a in objdump_at for a in fixups)


def test_every_nokprobe_entry_is_a_symbol(vmlinux, kernel_rules):
    """Each entry is a symbol's address: a C function, or an assembly entry point (no STT_FUNC size, so
    never a function the guest plans, refused or not)."""
    values = {s.value for s in vmlinux.symbols() if s.name}
    inside = [a for a in kernel_rules.blacklisted if kernel_rules.text[0] <= a < kernel_rules.text[1]]
    assert len(inside) > 100 and all(a in values for a in inside)


def test_the_regions_lie_in_the_text_and_name_known_functions(vmlinux, kernel_rules):
    lo, hi = kernel_rules.text
    assert all(lo <= s < e <= hi for s, e, _ in kernel_rules.regions)
    reason = {f.name: kernel_rules.function_reason(f) for f in vmlinux.functions()
              if f.name in ("exc_page_fault", "default_idle", "pipe_read", "__rcu_read_lock", "nmi_handle")}
    assert "noinstr" in reason["exc_page_fault"] and "cpuidle" in reason["default_idle"]
    assert reason["pipe_read"] == "" and "rcu_read_lock" in reason["__rcu_read_lock"]
    assert "NOKPROBE" in reason["nmi_handle"]
    # Every function the breakpoint's own path names exists in this kernel: a renamed one would be missed.
    names = {n for f in vmlinux.functions() for n in (f.name, *f.aliases)}
    assert set(rules.TRAP_PATH) - {"asm_exc_int3"} <= names


def test_live_image_round_trip(vmlinux, tmp_path: Path):
    """An image written from the vmlinux's own text reads back with the same functions, bytes and build-id."""
    sym = {s.name: s.value for s in vmlinux.symbols() if s.name in ("_stext", "_etext")}
    text = vmlinux.read(sym["_stext"], sym["_etext"] - sym["_stext"])
    img = KernelImage.open(str(live.write_live_image(vmlinux, text, tmp_path / "live.elf")))
    want = [(f.name, f.address, f.size, f.file, f.aliases) for f in vmlinux.functions() if f.section == ".text"]
    assert [(f.name, f.address, f.size, f.file, f.aliases) for f in img.functions()] == want
    assert img.build_id == vmlinux.build_id
    f = img.lookup("pipe_read")
    assert img.read(f.address, f.size) == vmlinux.read(f.address, f.size)
    from generator.common.errors import UserError

    with pytest.raises(UserError, match="cut short"):
        live.write_live_image(vmlinux, text[:-1], tmp_path / "short.elf")


def test_the_jump_proof_holds_every_site_the_guest_refuses(vmlinux, kernel_rules):
    """One record per table serves both readers: every site the ring-0 rules refuse a breakpoint at (each
    checked against objdump above) is bytes the jump proof lets no jump displace -- the ``ud2`` of every
    WARN() and BUG() (``__bug_table``) too, which the proof once did not read."""
    from generator.analysis import jumprefs

    held = jumprefs.for_image(vmlinux).held
    starts = {h.start for h in held}
    missed = sorted(a for a in kernel_rules.sites if a not in starts)
    assert not missed, f"{len(missed)} sites not held, first {hex(missed[0])}: {kernel_rules.sites[missed[0]]}"
    bugs = {h.start for h in held if "(__bug_table)" in h.why}
    assert len(bugs) > 100 and set(_sites(kernel_rules, "WARN() or BUG()")) <= bugs
