"""The ring-0 guest's target module (``sys/modules/kinst/linux/target/kk_target.c``), built with the pinned
kernel's kbuild, and what the host plans from its ``.ko``, checked against GNU objdump's view of the same
file.

objdump shares nothing with ``target.loader_rules`` or the planner: its relocation listing must name every
site the rules find in the module's own tables (``__mcount_loc``, ``.return_sites``), and its disassembly
must show, at the probes the plan makes of the two target functions, exactly the call forms the kernel
never runs.
"""

from __future__ import annotations

import re
import subprocess
from typing import Dict, List, Set

import pytest

from generator.common.errors import UserError
from generator.image.elf import KernelImage
from generator.run.ring0 import kernel, target
from generator.run.ring0 import plan as guest_plan
from helpers.skips import missing, require_tool

FUNCS = ("kk_target_call_mem", "kk_target_call_riprel")


@pytest.fixture(scope="module")
def ko() -> KernelImage:
    require_tool("make", "make", "the target module is built with the kernel's kbuild")
    require_tool("gcc-12", "gcc-12", "the target module is built with the kernel's compiler")
    try:
        return target.build(kernel.assets())
    except UserError as e:
        missing(f"the ring-0 guest's pinned Debian packages cannot be had: {e}")
        raise


def _objdump(*args: str) -> str:
    require_tool("objdump", "binutils", "the independent reader the target module is checked against")
    return subprocess.run(["objdump", *args], capture_output=True, text=True, check=True).stdout


def _reloc_targets(ko: KernelImage, section: str) -> Set[int]:
    """Where objdump says each relocation of ``section`` points: ``.text+0x40`` -> .text's address + 0x40."""
    secs = {s.name: s.addr for s in ko.sections}
    out = set()
    listing = _objdump("-r", "-j", section, ko.path)
    for m in re.finditer(r"^[0-9a-f]+ R_X86_64_\w+\s+(\.[\w.]+)(?:\+0x([0-9a-f]+))?$", listing, re.M):
        out.add(secs[m.group(1)] + int(m.group(2) or "0", 16))
    assert out or "RELOCATION RECORDS" not in listing, listing
    return out


def test_loader_rules_find_every_site_objdump_lists(ko):
    whole, sites = target.loader_rules(ko)
    assert whole == {}  # no alternative, paravirt site or NOKPROBE_SYMBOL() in the module
    for section, word in (("__mcount_loc", "ftrace"), (".return_sites", "return-thunk")):
        want = _reloc_targets(ko, section)
        assert want, f"the build put nothing in {section}: the test would prove nothing"
        assert {a for a, (_, why) in sites.items() if word in why} == want, section
        assert all(sites[a][0] for a in want)  # the loader rewrites them: masked


def _disassembly(ko: KernelImage, name: str) -> Dict[int, str]:
    """objdump's instruction text of function ``name``, by offset in .text."""
    text = _objdump("-d", "--no-show-raw-insn", "-j", ".text", ko.path)
    body = re.search(rf"^[0-9a-f]+ <{name}>:\n(.*?)(?:\n\n|\Z)", text, re.S | re.M)
    assert body, name
    out = {}
    for line in body.group(1).splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\t(.*)$", line)
        if m:
            out[int(m.group(1), 16)] = m.group(2).strip()
    return out


def test_the_plan_holds_the_two_call_forms_objdump_shows(ko):
    funcs: List = [f for f in ko.functions() if f.name in FUNCS]
    assert sorted(f.name for f in funcs) == sorted(FUNCS)
    plan, n_sites = guest_plan.plan_target(ko, funcs, "none")
    assert n_sites == 0 and len(plan.funcs) == 2, plan.refused
    # Refused: only the int3 after each ret (straight-line-speculation padding, never run).
    assert [(r.function, r.offset, r.reason.split(":")[0]) for r in plan.refused] == [
        ("kk_target_call_mem", 27, "int3"), ("kk_target_call_riprel", 16, "int3")]
    text = next(s.addr for s in ko.sections if s.name == ".text")
    dis = {n: _disassembly(ko, n) for n in FUNCS}
    by_kind: Dict[str, List[str]] = {}
    for p in plan.probes():
        pf = plan.funcs[p.func]
        by_kind.setdefault(p.kind, []).append(dis[pf.name][pf.address - text + p.offset])
    assert by_kind["call-mem"] == ["call   *0x8(%rbx)", "call   *(%rbx,%rcx,8)"], by_kind
    assert len(by_kind["call-riprel"]) == 1 and by_kind["call-riprel"][0].startswith("call   *0x0(%rip)")
    # The call through (%rip) reads a pointer the loader relocates: its disp32 is masked in the record.
    pf = next(f for f in plan.funcs if f.name == "kk_target_call_riprel")
    masked = [i for i in ko.isa.stream_decode(pf.records, pf.size) if i.kind == "call-riprel"][0].masks
    assert masked == ((2, 4),), masked
    # Every table address lies in the range the module exports, from which the kinst module places them.
    lo, hi = target.probed_range(ko)
    assert all(lo <= f.address and f.address + f.size <= hi for f in plan.funcs)


def test_functions_outside_the_exported_range_are_refused_with_a_reason(ko):
    show = next(f for f in ko.functions() if f.name == "kk_target_show")
    init = next(f for f in ko.functions() if f.name == "kk_target_init")
    whole, _ = target.loader_rules(ko)
    span = target.probed_range(ko)
    assert "outside" in target.refusal(show, whole, span)
    assert ".init.text" in target.refusal(init, whole, span)
    assert target.refusal(next(f for f in ko.functions() if f.name == FUNCS[0]), whole, span) == ""
