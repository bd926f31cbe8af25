"""The ring-0 guest's jump probes (``generator/run/ring0/jumps.py``) over the pinned Debian 6.1 vmlinux, held
to GNU objdump's disassembly of the same file.

The proof is jumpsafe.py's and the placement jumpplan.py's (tested on their own); what is checked here is
the guest's use of them: the proof run over the vmlinux for a table whose kernel part starts after the
target module's, the windows it picks in the table, the target's probes left to breakpoints, and a head
dropped where the live text differs from the vmlinux's.  objdump shares nothing with any of it: for every
head, its window must be whole instructions in objdump's reading, at least 5 bytes, its last starting
inside the jump's five, no call but the last, and no branch objdump prints anywhere in the chosen
functions may land inside the jump's bytes 1-4.
"""

from __future__ import annotations

import re
import subprocess
from typing import Dict, List, Tuple

import pytest

from generator.image.elf import KernelImage
from generator.run.ring0 import jumps, kernel, rules, target
from generator.run.ring0 import plan as gp
from helpers.ctext import c_bytes
from helpers.skips import missing, require_ring0_inputs, require_tool

# The CI set of tests/vm/test_ring0.py, kernel functions and the target module's two.
NAMES = ("pipe_read", "pipe_write", "ksys_write", "ksys_read", "vfs_read", "vfs_write", "copy_page_to_iter",
         "do_sys_openat2", "kernel_clone", "send_signal_locked", "dequeue_signal", "do_wait",
         "check_preempt_curr", "get_unmapped_area", "set_task_cpu", "__task_pid_nr_ns",
         "kk_target_call_mem", "kk_target_call_riprel")
_LINE = re.compile(r"^\s*(ffffffff[0-9a-f]{8}):\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$")
_TARGET = re.compile(r"\b(?:j[a-z]+|call|loop[a-z]*)\s+(ffffffff[0-9a-f]{8})\b")


@pytest.fixture(scope="module")
def guest():
    """(vmlinux, the guest plan over it, the jumps chosen) -- the vmlinux standing in for the live image."""
    from generator.common.errors import UserError

    require_ring0_inputs()
    try:
        assets = kernel.assets()
    except UserError as e:
        missing(f"the ring-0 guest's pinned Debian packages cannot be had: {e}")
    vm = KernelImage.open(str(assets.vmlinux))
    g = gp.plan_guest(vm, rules.read_rules(vm), NAMES, target=target.build(assets))
    return vm, g, jumps.choose(g.plan, g.target_tabled, g.rule, vm, vm)


def _objdump(vm: KernelImage, lo: int, hi: int) -> List[Tuple[int, int, str]]:
    """(address, length, text) of every instruction objdump decodes in [lo, hi)."""
    out = subprocess.run(["objdump", "-d", "-w", "-j", ".text", f"--start-address={lo:#x}",
                          f"--stop-address={hi:#x}", vm.path], capture_output=True, text=True, check=True).stdout
    return [(int(m.group(1), 16), len(m.group(2).split()), m.group(3).strip())
            for m in map(_LINE.match, out.splitlines()) if m]


def test_heads_against_objdump(guest):
    require_tool("objdump", "binutils", "the independent disassembler the jump windows are checked against")
    vm, g, j = guest
    plan = g.plan
    probes = list(plan.probes())
    assert len(j.fires) == plan.nprobes and j.heads > 500 and j.displaced > 100, j
    insns: Dict[int, Tuple[int, str]] = {}
    targets = set()
    for f in plan.funcs[g.target_tabled:]:
        for a, n, text in _objdump(vm, f.address, f.address + f.size):
            insns[a] = (n, text)
            m = _TARGET.search(text)
            if m:
                targets.add(int(m.group(1), 16))
    checked = 0
    for p in probes:
        k = j.fires[p.index]
        if not k:
            continue
        start = plan.link_address(p)
        at, covered = start, []
        while at < start + 5:
            assert at in insns, f"{start:#x}: the window does not end on an instruction objdump decodes"
            covered.append(insns[at])
            at += insns[at][0]
        assert len(covered) == k, f"{start:#x}: objdump finds {len(covered)} instructions under the jump, not {k}"
        assert not any(t.startswith("call") for _, t in covered[:-1]), f"{start:#x}: a call inside: {covered}"
        entering = [t for t in targets if start < t < start + 5]
        assert not entering, f"{start:#x}: objdump's branches land inside the jump at {[hex(t) for t in entering]}"
        checked += 1
    assert checked == j.heads


def test_the_target_modules_probes_keep_their_breakpoints(guest):
    _, g, j = guest
    theirs = sum(f.probes for f in g.plan.funcs[:g.target_tabled])
    assert theirs > 0 and not any(j.fires[:theirs]) and j.traps[jumps.TARGET] == theirs
    assert jumps.states(j).count("jump") == j.heads and jumps.states(j).count("displaced") == j.displaced


def test_a_head_whose_live_bytes_differ_stays_a_breakpoint(guest):
    """Where the live text is not the vmlinux's the proof read, the head is dropped (``live-bytes``), and
    every other head stays."""
    vm, g, j = guest
    probes = list(g.plan.probes())
    head = next(p for p in probes if j.fires[p.index] > 1)
    changed = g.plan.link_address(probes[head.index + 1])  # a displaced instruction's first byte

    class Live:
        """The vmlinux with one byte changed, as a kernel might have patched it."""

        def read(self, address: int, size: int) -> bytes:
            b = bytearray(vm.read(address, size))
            if address <= changed < address + size:
                b[changed - address] ^= 0xFF
            return bytes(b)

    again = jumps.choose(g.plan, g.target_tabled, g.rule, vm, Live())
    assert again.fires[head.index] == 0 and again.traps[jumps.LIVE_BYTES] == j.fires[head.index]
    assert again.heads == j.heads - 1
    assert [n for i, n in enumerate(again.fires) if i != head.index] == \
        [n for i, n in enumerate(j.fires) if i != head.index]


def test_the_guests_table_carries_the_heads_as_kinst_does(guest, tmp_path):
    """One record of the heads for both kernels: the guest's module is staged with the table's ``kt_jump``
    (``kinst_table.c`` as ``generate --jump`` renders it), per probe the guest's choice; its
    ``kinst_linux_jump.h`` only sizes the detours (the sum of the choice), and names no head itself."""
    from generator.providers.kinst import generate as kinst
    from generator.run.ring0 import kbuild

    vm, g, j = guest
    kinst.stage_core(g.plan, tmp_path, "test", [], j.as_choice())
    text = (tmp_path / "kinst_table.c").read_text()
    assert ".kt_jump = kinst_jump_blob," in text
    blob = c_bytes(text, "kinst_jump_blob")
    assert blob == bytes(j.fires) and j.heads > 100
    ctx = kbuild.target_context(vm, g.plan, 0, j)
    assert ctx["jump_slots"] == sum(j.fires) and "jump_blob" not in ctx
    plain = tmp_path / "plain"
    plain.mkdir()
    kinst.stage_core(g.plan, plain, "test", [], jumps.NO_JUMPS.as_choice())
    assert "kt_jump" not in (plain / "kinst_table.c").read_text()
