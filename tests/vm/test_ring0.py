"""The generated core in ring 0: `vm-test --guest linux` boots Debian's Linux 6.1 cloud kernel under QEMU,
loads the module built from the portable core, the generated table and the Linux glue, and every probe's
hits must equal an independent QEMU TCG plugin's count.

The CI tier probes a small function set (``CI_FUNCTIONS``) chosen so that every kind of the amd64 record is
armed and hit: the kernel's own functions, and the guest's target module for the two call forms the kernel
never runs; the default set (~86,000 probes) runs behind the ``slow`` marker.

Two runs build the glue broken on purpose (``kbuild.BREAKS``: a missing call emulation, a wrong
displacement, each a define that kbuild passes from make's command line) and must fail, naming a probe of
the broken kind.

With ``--jump`` (``Request.jump``) the same set places jump probes wherever the proof allows: every jump
probe's hits must equal QEMU's executions of its address (its int3 while the jump is placed from and
removed through a breakpoint, then its jmp), nothing may run at a displaced address, and two detours
broken on purpose (one that skips its handler, one that resumes one instruction short) must fail the run,
naming a probe (the ``slow`` tier, with a planted stack word the quiescence check must catch).  Two more change the table in memory (``session.run``'s ``tamper``: a record that hides a
%rip-relative displacement or a call), which the core's own record check must catch before arming.
Nothing committed is changed by any of them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from typing import Callable, Dict, Set, Tuple

import pytest

from generator import isa as isa_registry
from generator.analysis.plan import ProbePlan
from generator.cli.linuxguest import DEFAULT_FUNCTIONS, VmBooter
from generator.common.paths import REPO
from generator.run.ring0 import kbuild
from generator.run.ring0 import session as S
from helpers.skips import require_ring0_inputs

# System calls, VFS reads and writes, pipes, open, fork, signals, wait, and three scheduler functions
# whose indirect calls (call *%reg once the kernel drops its retpolines) the workload runs; and the target
# module's calls through memory and through (%rip), which the kernel's own text never runs.
CI_FUNCTIONS = ("pipe_read", "pipe_write", "ksys_write", "ksys_read", "vfs_read", "vfs_write", "copy_page_to_iter",
                "do_sys_openat2", "kernel_clone", "send_signal_locked", "dequeue_signal", "do_wait",
                "check_preempt_curr", "get_unmapped_area", "set_task_cpu", "__task_pid_nr_ns",
                "kk_target_call_mem", "kk_target_call_riprel")
# The kinds a break must name a probe of (kinds of the amd64 record).
BROKEN_KINDS = {"NO_CALL_EMULATION": {"call-direct", "call-reg", "call-mem", "call-riprel"},
                "WRONG_DISPLACEMENT": {"riprel"}}
NAMED = re.compile(r"^(\S+):(\d+) \(([a-z0-9-]+), 0x[0-9a-f]+\)")


@pytest.fixture(scope="module")
def ci_report(tmp_path_factory):
    require_ring0_inputs()
    runs = tmp_path_factory.mktemp("runs")
    return S.run(S.Request(functions=CI_FUNCTIONS, timeout=600.0, runs_dir=str(runs)), VmBooter())


def test_every_probe_counts_what_qemu_counts(ci_report):
    rep = ci_report
    d = rep.summary()
    assert rep.ok, rep.text()
    assert d["probes_armed"] == d["probes"] > 1000, d
    assert d["mismatches"] == 0 and d["hits"] == d["oracle_hits"] > 10000, d
    compared = [p for p in rep.probes if p.state == "armed"]
    assert all(p.hits == p.oracle_hits and p.oracle_other == 0 and p.oracle_stray == 0 for p in compared)
    assert d["workload_identical"] and not d["oops"]


def test_every_kind_of_the_record_is_armed_and_hit(ci_report):
    """Every kind the amd64 table can hold (the ISA record's list, its one owner), with a probe armed and hit
    whose hits equal QEMU's count."""
    every = {k.kind for k in isa_registry.by_name("amd64").table_kinds}
    proven = {p.kind for p in ci_report.probes if p.state == "armed" and p.hits and p.hits == p.oracle_hits}
    assert every - proven == set(), f"kinds never armed and hit: {sorted(every - proven)}\n{ci_report.text()}"
    target = [p for p in ci_report.probes if p.function.startswith("kk_target_call")]
    assert {p.kind for p in target if p.hits} >= {"call-mem", "call-riprel"}, target


def test_stress_re_arming_and_interrupts_in_trampolines(ci_report):
    d = ci_report.summary()
    # Disarm and re-arm during the workload: the plugin saw one window per arming, and they were paired.
    assert d["rearmed"] >= 1 and d["windows"] == d["rearmed"] + 1, d
    # The timer sampler caught the CPU inside a trampoline: they run interruptible.
    assert d["interrupts_in_trampolines"] > 0, d
    assert d["vm"]["status"] == "pass" and d["vm"]["end"] == "poweroff", d["vm"]


def test_json_lines(ci_report):
    lines = [json.dumps(p.to_json()) for p in ci_report.probes] + [json.dumps(ci_report.summary())]
    objs = [json.loads(x) for x in lines]
    assert all({"function", "offset", "kind", "hits", "oracle_hits"} <= set(o) for o in objs[:-1])
    assert {"probes_armed", "mismatches", "oops", "workload_identical"} <= set(objs[-1])


def _flip(kinds: Set[str], flipped: Dict[str, Set[Tuple[str, int]]]) -> Callable[[ProbePlan], ProbePlan]:
    """Every record of ``kinds`` turned into a plain trampoline: the core then copies the instruction
    verbatim, its rel32 unadjusted (a %rip-relative access, or a call, from the wrong place).
    ``flipped`` gets each changed probe's (function, offset), by kind."""
    def tamper(plan: ProbePlan) -> ProbePlan:
        isa = isa_registry.by_name(plan.arch)
        funcs = []
        for f in plan.funcs:
            insns = list(isa.stream_decode(f.records, f.size))
            for i in insns:
                if i.kind in kinds:
                    flipped.setdefault(i.kind, set()).add((f.qualified, i.offset))
            recs = b"".join(isa.stream_record(i.length, "trampoline" if i.kind in kinds else i.kind,
                                              0 if i.kind in kinds else i.dispoff, i.masks) for i in insns)
            funcs.append(f._replace(records=recs))
        return dataclasses.replace(plan, funcs=tuple(funcs))
    return tamper


@pytest.mark.parametrize("breakage", sorted(set(kbuild.BREAKS) - kbuild.NEEDS_JUMPS))
def test_a_broken_glue_fails_the_run_and_names_the_probe(breakage, tmp_path):
    """The glue built with KINST_LINUX_BREAK_<breakage> (a missing call emulation, a wrong displacement):
    the run must fail, and its report must name a probe of the broken kind."""
    require_ring0_inputs()
    rep = S.run(S.Request(functions=CI_FUNCTIONS, cycles=0, timeout=300.0, runs_dir=str(tmp_path),
                          breakage=breakage), VmBooter())
    assert not rep.ok, f"the glue broken with {breakage} passed:\n{rep.text()}"
    named = [m for m in map(NAMED.match, rep.mismatches) if m]
    assert named, f"the failure names no probe:\n{rep.text()}"
    assert {m.group(3) for m in named} & BROKEN_KINDS[breakage], rep.mismatches
    assert "FAIL" in rep.text() and kbuild.BREAKS[breakage] in rep.text()


def test_a_tampered_table_is_caught_by_the_core(tmp_path):
    """A table that hides displacements (riprel) and calls (every call kind) in one run either makes the run
    fail, naming a probe or the workload, or is caught by the core before anything is armed:
    kinst_core_derive() checks a plain trampoline record against the live bytes (issue 20 item 10) and the
    glue leaves every such probe unarmed ("derive"), while the rest run and match QEMU's counts."""
    require_ring0_inputs()
    kinds = {"riprel", "call-direct", "call-reg", "call-mem", "call-riprel"}
    flipped: Dict[str, Set[Tuple[str, int]]] = {}
    rep = S.run(S.Request(functions=CI_FUNCTIONS, timeout=300.0, runs_dir=str(tmp_path)), VmBooter(),
                tamper=_flip(kinds, flipped))
    assert set(flipped) == kinds, f"the CI set has no probe of {sorted(kinds - set(flipped))} to break"
    every = set().union(*flipped.values())
    if rep.ok:
        states = {p.state for p in rep.probes if (p.function, p.offset) in every}
        assert states == {"derive"}, f"a hidden displacement or call passed with the probes {states}:\n{rep.text()}"
        assert rep.armed == len(rep.probes) - len(every), rep.text()
        return
    # The failure names a probe (the trampoline it crashed in, or the last one a vCPU hit), or the workload.
    names = [m for m in rep.mismatches if ":" in m]
    assert names or not rep.workload_identical, rep.text()
    assert "FAIL" in rep.text()


@pytest.mark.slow
def test_default_function_set(tmp_path):
    """The default run: ~86,000 probes armed at once, `invoke vm-test --guest linux --json`."""
    require_ring0_inputs()
    proc = subprocess.run([sys.executable, "-m", "generator", "vm-test", "--guest", "linux", "--json",
                           "--runs-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=1800)
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    summary = lines[-1]
    assert proc.returncode == 0, summary
    assert summary["probes_armed"] >= 50000 and summary["mismatches"] == 0 and summary["workload_identical"]
    assert len(lines) - 1 == summary["probes"]
    assert DEFAULT_FUNCTIONS.is_file()


@pytest.fixture(scope="module")
def jump_report(tmp_path_factory):
    require_ring0_inputs()
    runs = tmp_path_factory.mktemp("runs")
    return S.run(S.Request(functions=CI_FUNCTIONS, timeout=600.0, runs_dir=str(runs), jump=True), VmBooter())


def test_jump_probes_count_what_qemu_counts(jump_report):
    """`vm-test --guest linux --jump` over the CI set: jumps wherever proven, breakpoints elsewhere, every
    probe's hits equal to QEMU's count, the workload's output identical, no oops, BUG or WARN (an unwinder
    warning from a walk through a detour would be one)."""
    rep = jump_report
    d = rep.summary()
    j = d["jump"]
    assert rep.ok, rep.text()
    assert j["jump_probes_armed"] > 500 and j["jump_probes_hit"] > 100 and j["trap_probes_armed"] > 100, j
    # The jumps were really written and run: QEMU executed a jmp at heads, many times.
    assert j["oracle_jump_executions"] > 10000 and int(j["module"]["placed"]) > 500, j
    heads = [p for p in rep.probes if p.mode == "jump" and p.state == "armed"]
    assert all(p.hits == p.oracle_hits + p.oracle_jumps and p.oracle_other == 0 for p in heads)
    displaced = [p for p in rep.probes if p.mode == "displaced"]
    assert displaced and all(p.oracle_hits + p.oracle_other + p.oracle_jumps == 0 for p in displaced)
    assert d["workload_identical"] and not d["oops"] and d["windows"] == d["rearmed"] + 1 >= 2, d
    # What the module measured: the kernel's preemption model, and an unwind from inside a detour.
    assert j["preempt"] == "voluntary" and j["unwind"] is not None, j


@pytest.mark.slow  # two more runs: over the default tier's time budget with the jump run
@pytest.mark.parametrize("breakage", sorted(kbuild.JUMP_BREAKS))
def test_a_broken_detour_fails_the_run_and_names_the_probe(breakage, tmp_path):
    """The glue's detours built broken (a head's chunk that skips the handler; a detour that resumes at its
    last displaced instruction, inside the jump): the run fails and names a jump probe's head or a probe its
    jump displaced."""
    require_ring0_inputs()
    rep = S.run(S.Request(functions=CI_FUNCTIONS, cycles=0, timeout=300.0, runs_dir=str(tmp_path),
                          breakage=breakage, jump=True), VmBooter())
    assert not rep.ok, f"the detour broken with {breakage} passed:\n{rep.text()}"
    named = {(m.group(1), int(m.group(2))) for m in map(NAMED.match, rep.mismatches) if m}
    jumped = {(p.function, p.offset) for p in rep.probes if p.mode in ("jump", "displaced")}
    assert named & jumped, f"the failure names no jump probe:\n{rep.text()}"
    assert "FAIL" in rep.text() and kbuild.BREAKS[breakage] in rep.text()


@pytest.mark.slow  # one more run each, as the broken detours
@pytest.mark.parametrize("planted", sorted(kbuild.STALE_WORDS))
def test_the_quiescence_check_keeps_a_head_a_task_is_stopped_in(planted, tmp_path):
    """A word inside the first head's jump (``JUMP_STALE_WORD``), or inside a head's trampoline, which resumes
    inside the window (``JUMP_STALE_TRAMP_WORD``), planted on the stack of the CPU that switches the sites, as
    a task stopped there would leave it: the core's quiescence check, fed every task's stack and the head's
    trampoline range, keeps that head a breakpoint on every arm -- and only that one -- while every count
    holds."""
    require_ring0_inputs()
    rep = S.run(S.Request(functions=CI_FUNCTIONS, cycles=1, timeout=300.0, runs_dir=str(tmp_path),
                          breakage=planted, jump=True), VmBooter())
    assert rep.ok, rep.text()
    j = rep.summary()["jump"]
    heads = int(j["module"]["heads"])
    assert int(j["module"]["kept_by_quiescence"]) >= 2, j  # two arms
    assert int(j["module"]["placed"]) <= heads - 1, j
