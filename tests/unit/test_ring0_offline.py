"""The ring-0 guest's host side without a kernel: its table restrictions, the function names, the kernel
rules' verdicts and table reading, the plugin's report, the comparison, the package pins, the command line.

Inputs are made here, by hand, each with a value that a wrong reading would get wrong; the real kernel's
tables are read in tests/toolchain/test_ring0_kernel.py and the whole run is tests/vm/test_ring0.py.
"""

from __future__ import annotations

import dataclasses

import struct
from pathlib import Path
from typing import List

import pytest

from generator import isa as isa_registry
from generator.analysis.plan import PlanFunc, ProbePlan, digest
from generator.common import apt
from generator.common.errors import UserError
from generator.image.elf import Function
from generator.run.ring0 import jumps, oracle, packages, report, rules
from generator.run.ring0 import plan as rp
from generator.run.ring0.records import Booted, Request, Session

AMD64 = isa_registry.by_name("amd64")
BASE = 0xFFFFFFFF81000000
# call rel32; mov %rsp,%rbp; ret -- then, for a second function, push %rbp; ret
CODE = bytes.fromhex("e8 11 22 33 44 48 89 e5 c3") + bytes.fromhex("55 c3")


class FakeImage:
    """What restrict() and select() read of an image: bytes by address, the function list."""

    path = "fake-vmlinux"

    def __init__(self, funcs: List[Function] = ()):
        self._funcs = list(funcs)

    def read(self, address: int, size: int) -> bytes:
        off = address - BASE
        return CODE[off : off + size]

    def functions(self) -> List[Function]:
        return self._funcs


def _plan() -> ProbePlan:
    r1 = (AMD64.stream_record(5, "call-direct", 0, ()) + AMD64.stream_record(3, "trampoline", 0, ())
          + AMD64.stream_record(1, "trampoline", 0, ()))
    r2 = AMD64.stream_record(1, "trampoline", 0, ()) + AMD64.stream_record(1, "trampoline", 0, ())
    f1 = PlanFunc("f", "f", BASE, 9, digest(CODE[:9]), r1, 0, 3)
    f2 = PlanFunc("g", "g", BASE + 9, 2, digest(CODE[9:]), r2, 3, 2)
    return ProbePlan("amd64", "fake", "ET_EXEC", "", "", (f1, f2), ())


def test_restrict_masks_and_refuses_kernel_sites():
    sites = {BASE: {0: (True, "an ftrace site"), 6: (False, "fixed up")}}
    plan, n = rp.restrict(_plan(), FakeImage(), sites)
    assert n == 2
    f, g = plan.funcs
    insns = list(AMD64.stream_decode(f.records, f.size))
    # The call is refused and its five bytes masked (4 + 1); the mov (a site inside it) refused, unmasked.
    assert [(i.kind, i.masks) for i in insns] == [(None, ((0, 4), (4, 1))), (None, ()), ("trampoline", ())]
    assert f.probes == 1 and f.digest == digest(CODE[:9], [(0, 4), (4, 1)]) != digest(CODE[:9])
    assert g.first == 1 and g.records == _plan().funcs[1].records  # renumbered, otherwise untouched
    assert [(r.offset, r.reason) for r in plan.refused] == [(0, "an ftrace site"), (5, "fixed up")]
    assert plan.nprobes == 3


def test_restrict_keeps_a_modules_relocated_fields_masked():
    """A module's function (ET_REL) has its relocated fields masked; a kernel site elsewhere in it must not
    unmask them, in the records or in the digest (the loader writes them: the live bytes differ there)."""
    plan = _plan()
    f = plan.funcs[0]
    r1 = AMD64.stream_record(5, "call-direct", 0, ((1, 4),)) + f.records[len(AMD64.stream_record(5, "call-direct",
                                                                                                  0, ())):]
    plan = dataclasses.replace(plan, funcs=(f._replace(records=r1, digest=digest(CODE[:9], [(1, 4)])),
                                            plan.funcs[1]))
    out, n = rp.restrict(plan, FakeImage(), {BASE: {8: (False, "a WARN() site")}})
    insns = list(AMD64.stream_decode(out.funcs[0].records, 9))
    assert n == 1 and [(i.kind, i.masks) for i in insns] == [("call-direct", ((1, 4),)), ("trampoline", ()),
                                                              (None, ())]
    assert out.funcs[0].digest == digest(CODE[:9], [(1, 4)])


def test_restrict_drops_a_function_left_without_probes():
    sites = {BASE + 9: {9 - 9: (False, "x"), 1: (False, "y")}}
    plan, n = rp.restrict(_plan(), FakeImage(), sites)
    assert n == 2 and [f.name for f in plan.funcs] == ["f"] and plan.funcs[0].first == 0


def test_select_means_every_local_copy():
    a = Function("pipe_read", BASE, 9, "local", "pipe.c", ".text")
    b = Function("pipe_read", BASE + 16, 9, "local", "other.c", ".text")
    c = Function("vfs_read", BASE + 32, 9, "global", None, ".text", ("vfs_read_alias",))
    img = FakeImage([a, b, c])
    funcs, asked, theirs = rp.select(img, ["pipe_read", "# a comment", "", "vfs_read_alias"])
    assert funcs == [a, b, c] and asked == ("pipe_read", "vfs_read_alias") and theirs == []
    assert rp.select(img, ["pipe_read@other.c"])[0] == [b]
    with pytest.raises(UserError, match="no function 'nope'"):
        rp.select(img, ["nope"])
    # A name the kernel lacks is looked up in the target module; the kernel's copy wins a name both have.
    t = Function("kk_target_call_mem", 0x10070, 28, "global", None, ".text")
    mod = FakeImage([t, Function("vfs_read", 0x10090, 4, "global", None, ".text")])
    assert rp.select(img, ["kk_target_call_mem", "vfs_read"], mod) == ([c], ("kk_target_call_mem", "vfs_read"),
                                                                         [t])
    with pytest.raises(UserError, match="no function 'nope'.* nor in"):
        rp.select(img, ["nope"], mod)
    with pytest.raises(UserError, match="no functions named"):
        rp.select(img, ["# only a comment"])


def test_kernel_rules_function_verdicts():
    kr = rules.KernelRules((BASE, BASE + 0x1000), ((BASE + 0x100, BASE + 0x200, "in .noinstr.text"),),
                           frozenset({BASE + 0x300}), {})

    def f(name: str, addr: int, size: int = 0x10) -> Function:
        return Function(name, addr, size, "global", None, ".text")

    assert kr.function_reason(f("a", BASE)) == ""
    assert "not in the kernel's text" in kr.function_reason(f("a", BASE + 0xFF8))  # runs past _etext
    assert kr.function_reason(f("a", BASE + 0xF8)) == "in .noinstr.text"  # overlaps the region's start
    assert "NOKPROBE_SYMBOL" in kr.function_reason(f("a", BASE + 0x300))
    assert "rcu_read_lock" in kr.function_reason(f("__rcu_read_lock", BASE + 0x400))


class TableImage:
    """An image holding one site table at ``START`` for ``rules._table``."""

    START = 0xFFFFFFFF82000000
    path = "tables"

    def __init__(self, raw: bytes):
        self.raw = raw

    def read(self, address: int, size: int) -> bytes:
        assert address == self.START and size == len(self.raw)
        return self.raw


def test_site_tables_relative_and_absolute():
    t = next(t for t in rules.SITE_TABLES if t.bounds[0] == "__start___jump_table")
    lo, hi = BASE, BASE + 0x1000
    # Two jump entries: code = &entry.code + s32; the second's points outside the text and is dropped.
    raw = struct.pack("<iiq", BASE + 0x10 - TableImage.START, 0, 0) + struct.pack("<iiq", 0x100, 0, 0)
    sym = {t.bounds[0]: TableImage.START, t.bounds[1]: TableImage.START + len(raw)}
    assert rules._table(TableImage(raw), sym, t, lo, hi) == [BASE + 0x10]
    m = next(t for t in rules.SITE_TABLES if t.bounds[0] == "__start_mcount_loc")
    raw = struct.pack("<QQ", BASE + 0x20, BASE + 0x30)
    sym = {m.bounds[0]: TableImage.START, m.bounds[1]: TableImage.START + len(raw)}
    assert rules._table(TableImage(raw), sym, m, lo, hi) == [BASE + 0x20, BASE + 0x30]
    with pytest.raises(UserError, match="whole number"):
        short = {m.bounds[0]: TableImage.START, m.bounds[1]: TableImage.START + 15}
        rules._table(TableImage(raw[:-1]), short, m, lo, hi)


def test_plugin_counts(tmp_path):
    oracle.write_probes(tmp_path / "p.txt", [oracle.Site(0xFFFFFFFF81000000, False), oracle.Site(0x1C, True)])
    assert (tmp_path / "p.txt").read_text() == "ffffffff81000000\n+1c\n"
    out = tmp_path / "o.txt"
    out.write_text("windows 2\nunpaired 0\nopen 0\nanchors 1\nlast 1 1\nlast 0 7\n0 5 0 0 4 0\n1 3 1 2 0 6\n")
    c = oracle.read_counts(out, 2)
    assert (c.windows, c.anchors, c.inside, c.other, c.stray, c.last) == (2, 1, [5, 3], [0, 1], [0, 2], {1: 1})
    assert (c.jumps, c.jumps_out) == ([4, 0], [0, 6])
    with pytest.raises(UserError, match="expected 3"):
        oracle.read_counts(out, 3)
    with pytest.raises(UserError, match="wrote no counts"):
        oracle.read_counts(tmp_path / "missing", 2)


def test_oops_lines_and_the_trampoline_they_name(tmp_path):
    log = tmp_path / "console.log"
    log.write_text("| WARNING: printed by the workload\n[ 1.0] BUG: unable to handle page fault\n"
                   "[ 1.1] RIP: 0010:kinst_linux_tramps+0x40/0x1000 [kinst]\nplain line\n")
    oops = report.oops_lines(log)
    assert oops == ["[ 1.0] BUG: unable to handle page fault", "[ 1.1] RIP: 0010:kinst_linux_tramps+0x40/0x1000 [kinst]"]
    assert report.trampoline_of(oops, {}, 32, 10) == 2
    raw = ["RIP: 0010:0xffffffffc0001060"]
    assert report.trampoline_of(raw, {"tramps": "0xffffffffc0001000 320"}, 32, 10) == 3
    assert report.trampoline_of(raw, {}, 32, 10) is None
    assert report.trampoline_of(["RIP: 0010:kinst_linux_tramps+0x4000/0x5000"], {}, 32, 10) is None


def _session(tmp_path: Path, hits: List[int], inside: List[int], stray: List[int], workload: str,
             windows: int = 2, jumped: List[int] = (0,) * 5, jumps_out: List[int] = (0,) * 5,
             fires: tuple = (), states: List[int] = (0,) * 5, other: List[int] = (0,) * 5,
             jump: bool = False) -> report.Report:
    """A finished probe boot over ``_plan()``'s five probes: the module's hits (``hits``, ``states``, and 1 in
    its jump column where ``fires`` names a head), the plugin's counts (int3 ``inside`` and ``stray``, ``other``,
    jmp executions ``jumped`` and ``jumps_out``)."""
    plan = _plan()
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    probes = list(plan.probes())
    addrs = [plan.link_address(p) for p in probes]
    heads = [1 if fires and fires[i] else 0 for i in range(5)]
    (out / "hits.txt").write_text("".join(f"{i} {a:x} {h} {st} {j}\n" for i, (a, h, st, j)
                                          in enumerate(zip(addrs, hits, states, heads))))
    (out / "rearmed").write_text("1\n")
    (out / "workload.out").write_text(workload)
    (tmp_path / "console.log").write_text("[ 0.1] ok\n")
    counts = tmp_path / "oracle.txt"
    counts.write_text(f"windows {windows}\nunpaired 0\nopen 0\n"
                      + "".join(f"{i} {x} {o} {s} {j} {jo}\n"
                                for i, (x, o, s, j, jo) in enumerate(zip(inside, other, stray, jumped, jumps_out))))
    ref = tmp_path / "ref.out"
    ref.write_text("same\n")
    s = Session(Request(functions=("f",), jump=jump))
    s.guest = rp.GuestPlan(plan, ("f",), 2, 0, 0, "none")
    s.probe = Booted("pass", "poweroff", tmp_path, out, tmp_path / "console.log", {}, (), "")
    if fires:
        s.jumps = jumps.GuestJumps(tuple(fires), sum(1 for n in fires if n), sum(fires) - sum(1 for n in fires if n),
                                   {})
    firsts = [CODE[a - BASE] for a in addrs]
    return report.compare(s, probes, addrs, counts, ref, firsts)


def test_compare_passes_only_when_everything_agrees(tmp_path):
    good = _session(tmp_path, [4, 0, 1, 2, 0], [4, 0, 1, 2, 0], [0] * 5, "same\n")
    assert good.ok and good.armed == 5 and good.hit == 3, good.text()
    off = _session(tmp_path, [4, 0, 1, 2, 0], [4, 0, 2, 2, 0], [0] * 5, "same\n")
    assert not off.ok and off.mismatches == ["f:8 (trampoline, 0xffffffff81000008): module 1 hits, QEMU 2 "
                                             "breakpoint executions"]
    stray = _session(tmp_path, [4, 0, 1, 2, 0], [4, 0, 1, 2, 0], [0, 0, 0, 0, 9], "same\n")
    assert not stray.ok and "g:1" in stray.mismatches[0] and "nothing was armed" in stray.mismatches[0]
    differs = _session(tmp_path, [4, 0, 1, 2, 0], [4, 0, 1, 2, 0], [0] * 5, "other\n")
    assert not differs.ok and not differs.workload_identical and "line 1" in differs.workload_diff
    windows = _session(tmp_path, [4, 0, 1, 2, 0], [4, 0, 1, 2, 0], [0] * 5, "same\n", windows=3)
    assert not windows.ok and "3 arm windows" in windows.errors[0]


def test_a_wrong_package_digest_caches_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(packages, "CACHE_DIR", tmp_path)

    def fake_download(name: str, version: str, into: Path) -> Path:
        deb = into / f"{name}_{version}_amd64.deb"
        deb.write_bytes(b"not the package")
        return deb

    monkeypatch.setattr(apt, "download_binary", fake_download)
    with pytest.raises(UserError, match="SHA256 .* but the pin"):
        packages.fetch(packages.KBUILD)
    assert not packages.cached(packages.KBUILD) and [p.name for p in tmp_path.iterdir()] == [".linux-kbuild-6.1.lock"]


def test_a_version_gone_from_the_archive_says_how_to_move_the_pin(tmp_path, monkeypatch):
    def fake_run(argv, cwd, what):
        raise UserError(f"{what}: apt-get failed: E: Version '6.1.192-3' for 'linux-kbuild-6.1' was not found")

    monkeypatch.setattr(apt, "run", fake_run)
    with pytest.raises(UserError) as e:
        apt.download_binary("linux-kbuild-6.1", "6.1.192-3", tmp_path)
    assert "no longer in the archive" in str(e.value) and "generator/run/ring0/packages.py" in str(e.value)


@pytest.mark.parametrize("argv, message", [
    (["--guest", "linux", "--script", "x.sh"], "do not go with --guest linux"),
    (["--function", "pipe_read"], "go with --guest linux"),
    (["--jump"], "go with --guest linux"),
    (["--guest", "linux", "--smp", "0"], "at least 1"),
    (["--guest", "linux", "--smp", "2", "--cpus", "1"], "disagree"),
    (["--guest", "linux", "--workload", "/no/such/file"], "no such file"),
    (["--guest", "linux", "--cycles", "-1"], "cannot be negative"),
])
def test_linux_guest_options_are_checked_before_any_work(argv, message, capsys):
    from generator.cli import main

    assert main(["vm-test", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_the_guest_plans_without_a_prologue_rule():
    # mov %rdi,%rax; ret: no push %rbp anywhere.
    code = bytes.fromhex("48 89 f8 c3")
    insns, _ = AMD64.decode(code, BASE, len(code))
    assert AMD64.frame_verdict(insns, code, "any") != ""
    assert AMD64.frame_verdict(insns, code, rp.GUEST_PROLOGUE_RULE) == ""


def test_vm_linux_guest_needs_a_kernel_package(tmp_path):
    from vm.config import VMConfig, VMError, validate

    with pytest.raises(VMError, match="unpacked linux-image package"):
        validate(VMConfig(guest="linux", dry_run=True))
    (tmp_path / "boot").mkdir()
    validate(VMConfig(guest="linux", image_package=str(tmp_path), dry_run=True, qemu_args=("-plugin", "x")))
    with pytest.raises(VMError, match="bhyve"):
        validate(VMConfig(guest="linux", image_package=str(tmp_path), dry_run=True, backend="bhyve",
                          qemu_args=("-plugin", "x")))


def test_qemu_gets_the_callers_switches_last(tmp_path):
    from vm.backends import accel, qemu
    from vm.config import GUESTS, Timeouts
    from vm.plan import Plan

    plan = Plan(run_id="r", name="n", guest=GUESTS["linux"], backend="qemu", accel=accel.AccelChoice("tcg", "t"),
                timeouts=Timeouts(60, 300, 5, 0.5), memory_mib=512, cpus=2, run_dir=tmp_path,
                base=tmp_path / "b.raw", base_format="raw", overlay=tmp_path / "o.qcow2", overlay_format="qcow2",
                meta=tmp_path / "m.tar", kernel=Path("/k"), append="x", qemu_args=("-plugin", "lib.so,a=1"))
    argv = qemu.qemu_args(plan)
    assert argv[-2:] == ["-plugin", "lib.so,a=1"] and argv[argv.index("-smp") + 1] == "2"


# _plan()'s probes: f+0 call rel32 (e8, 5 bytes), f+5 mov (3), f+8 ret, g+0 push, g+1 ret.  A head at f+0
# whose jump displaces f+0 only, and one at f+5 displacing f+5 and f+8 (as if the proof allowed it).
FIRES = (1, 2, 0, 0, 0)


def test_planned_states_follow_the_heads():
    assert jumps.states(jumps.GuestJumps(FIRES, 2, 1, {})) == ("jump", "jump", "displaced", "trap", "trap")
    assert jumps.states(jumps.GuestJumps((0, 3, 0, 0, 1), 2, 2, {})) == ("trap", "jump", "displaced", "displaced",
                                                                         "jump")


def test_a_jump_probe_counts_its_breakpoint_and_its_jump_executions(tmp_path):
    """A head's hits are the int3 executions (while its jump is placed from and removed through a
    breakpoint) and the jmp executions together; a breakpoint's are its int3 executions alone."""
    states = [0, 0, 6, 0, 0]  # f+8 displaced (KINST_LINUX_DISPLACED)
    good = _session(tmp_path, [7, 3, 0, 2, 0], [2, 1, 0, 2, 0], [0] * 5, "same\n", fires=FIRES, states=states,
                    jumped=[5, 2, 0, 0, 0], jump=True)
    assert good.ok, good.text()
    assert [p.mode for p in good.probes] == ["jump", "jump", "displaced", "trap", "trap"]
    d = good.summary()
    assert d["hits"] == d["oracle_hits"] == 12 and d["jump"]["jump_probes_armed"] == 2, d["jump"]
    assert d["jump"]["oracle_jump_executions"] == 7 and d["jump"]["displaced"] == 1
    # The detour skipped its handler (the module missed its jump hits).
    short = _session(tmp_path, [2, 3, 0, 2, 0], [2, 1, 0, 2, 0], [0] * 5, "same\n", fires=FIRES, states=states,
                     jumped=[5, 2, 0, 0, 0], jump=True)
    assert not short.ok and short.mismatches == ["f:0 (call-direct, 0xffffffff81000000): module 2 hits, QEMU 7 "
                                                 "breakpoint and jump executions"]
    # A jmp executed at a breakpoint probe while armed is its original instruction, not a hit.
    trap = _session(tmp_path, [7, 3, 0, 2, 0], [2, 1, 0, 2, 0], [0] * 5, "same\n", fires=FIRES, states=states,
                    jumped=[5, 2, 0, 4, 0], jump=True)
    assert not trap.ok and "g:0" in trap.mismatches[0] and "original instruction 4 times" in trap.mismatches[0]


def test_nothing_may_run_at_a_displaced_address(tmp_path):
    """The proof says nothing enters a jump's displaced bytes; a detour that resumed short would run there."""
    states = [0, 0, 6, 0, 0]
    bad = _session(tmp_path, [7, 3, 0, 2, 0], [2, 1, 0, 2, 0], [0] * 5, "same\n", fires=FIRES, states=states,
                   jumped=[5, 2, 0, 0, 0], other=[0, 0, 3, 0, 0], jump=True)
    assert not bad.ok and bad.mismatches == ["f:8 (trampoline, 0xffffffff81000008): QEMU ran 3 instructions at "
                                             "this displaced address while its jump was armed"]
    # Without the module's rows (the guest died), the host's plan says which probes are displaced.
    (tmp_path / "out" / "hits.txt").unlink()
    s = bad.session
    again = report.compare(s, list(s.guest.plan.probes()), [p.address for p in bad.probes], tmp_path / "oracle.txt",
                           tmp_path / "ref.out")
    assert [p.mode for p in again.probes] == ["jump", "jump", "displaced", "trap", "trap"]
    assert any("displaced address" in m for m in again.mismatches), again.mismatches


def test_a_jump_left_behind_is_caught_unless_the_instruction_is_one(tmp_path):
    """A jmp rel32 executed at a jump probe's head outside every window is a jump left behind, unless the
    original instruction is a jmp rel32 (the plugin cannot tell; the host judges by the original first byte).
    Elsewhere the kernel runs jumps of its own outside the windows (its unpatched text early in the boot, jump
    labels): not ours to judge."""
    quiet = dict(fires=FIRES, states=[0, 0, 6, 0, 0], jump=True)
    left = _session(tmp_path, [0] * 5, [0] * 5, [0] * 5, "same\n", jumps_out=[0, 9, 0, 0, 0], **quiet)
    assert not left.ok and "f:5" in left.mismatches[0] and "a jump there 9 times" in left.mismatches[0]
    kernel = _session(tmp_path, [0] * 5, [0] * 5, [0] * 5, "same\n", jumps_out=[0, 0, 0, 9, 0], **quiet)
    assert not kernel.mismatches, kernel.mismatches
    global CODE
    saved = CODE
    try:
        CODE = saved[:5] + bytes([0xE9]) + saved[6:]  # f+5 "is" a jmp rel32
        natural = _session(tmp_path, [0] * 5, [0] * 5, [0] * 5, "same\n", jumps_out=[0, 9, 0, 0, 0], **quiet)
        assert not natural.mismatches, natural.mismatches
    finally:
        CODE = saved


def test_an_oops_in_a_detour_names_its_head(tmp_path):
    info = {"detours": "0xffffffffc0100000 960 192"}
    fires = (0, 2, 0, 3, 0, 0, 0)  # slots 0-1: probe 1's; 2-4: probe 3's
    at = report.detour_of(["RIP: 0010:kinst_linux_detours+0x190/0x3c0 [kinst]"], info, fires)
    assert at == 3  # 0x190 = 400: chunk 2
    assert report.detour_of(["RIP: 0010:0xffffffffc01000c1"], info, fires) == 1  # chunk 1
    assert report.detour_of(["RIP: 0010:kinst_linux_detours+0x3c0/0x3c0 [kinst]"], info, fires) is None
    # Chunks of another size (the module says which): 0x190 is chunk 6 of 64 bytes, past every slot.
    assert report.detour_of(["RIP: 0010:kinst_linux_detours+0x190/0x3c0 [kinst]"],
                            {"detours": "0xffffffffc0100000 320 64"}, fires) is None
    assert report.detour_of(["RIP: 0010:kinst_linux_detours+0x90/0x3c0 [kinst]"],
                            {"detours": "0xffffffffc0100000 320 64"}, fires) == 3
    assert report.detour_of(["RIP: 0010:0xffffffffc01000c1"], {}, fires) is None


def test_the_bench_puts_the_jump_run_beside_the_breakpoint_run():
    from generator.bench.vm import _ring0_markdown

    vm = {"boot": 1.0, "run": 2.0, "total": 3.0}
    row = {"ok": True, "functions": 9, "probes_armed": 80, "probes_hit": 20, "hits": 5, "oracle_hits": 5, "vm": vm,
           "wall": 4.0, "peak_rss_mib": 300.0, "seconds": {}}
    jump = dict(row, probes_armed=60, jump={"jump_probes_armed": 40, "displaced": 20, "trap_probes_armed": 20})
    text = _ring0_markdown({"default": row, "default_jump": jump,
                            "unprobed": {"timings": vm, "wall": 1.0, "peak_rss_mib": 200.0, "status": "pass"}})
    rows = [line for line in text.splitlines() if line.startswith("| default set")]
    assert rows == ["| default set (9 functions) | 80 | 20 | 5 (=) | 1.0 | 2.0 | 3.0 | 4.0 | 300.0 | PASS |",
                    "| default set, --jump: 40 jumps (displacing 20) and 20 breakpoints (9 functions) | 60 | 20 | "
                    "5 (=) | 1.0 | 2.0 | 3.0 | 4.0 | 300.0 | PASS |"]


def test_the_module_cache_key_holds_the_heads(tmp_path, monkeypatch):
    """The heads reach the module through the table (``kt_jump``), not the header's context: two choices with
    the same number of heads and chunks must still build two modules, not share a cached one."""
    from generator.run.ring0 import kbuild

    keys: List[str] = []
    monkeypatch.setattr(kbuild, "require_tools", lambda: None)
    monkeypatch.setattr(kbuild, "tool_version", lambda cc: "gcc 12")
    monkeypatch.setattr(kbuild, "target_context", lambda vm, plan, start, j: {"jump_slots": sum(j.fires)})
    monkeypatch.setattr(kbuild, "compile_cached", lambda d, key, make, marker: keys.append(key) or tmp_path)

    class Ko:
        headers = "headers"  # stands for the assets too

        def sha256(self) -> str:
            return "0" * 64

    one = jumps.GuestJumps((0, 2, 0, 0, 0), 1, 1, {})
    other = jumps.GuestJumps((0, 0, 0, 2, 0), 1, 1, {})
    for j in (one, other, one):
        kbuild.build_module(Ko(), None, _plan(), "cmd", Ko(), 0, jumps=j)  # type: ignore[arg-type]
    assert keys[0] != keys[1] and keys[0] == keys[2]
