"""The NMI path's callees are refused with its entry points, and the generated exclusion list says so.

A breakpoint in a function an NMI handler calls is taken in NMI context as
surely as one in the handler (docs/refusals.md).  The sample kernel has an
amd64-shaped NMI path (samples/kernel/stack_machdep.c, subr_prf.c):
``stack_nmi_handler`` -> ``stack_capture`` -> ``stack_zero``/``stack_put``,
``nmi_handle_intr`` -> ``isa_nmi`` -> ``printf``/``log`` -> ``kvprintf`` ->
``cnputc``, and ``nmi_handle_intr`` -> ``panic`` -> ``kern_reboot``, where the
closure stops (the panic path ends the system).  The call graph here is
objdump's reading of the image, not kinstkit's: every ``call``/``jmp`` whose
target objdump names as another function.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Dict, Set

import pytest

from generator.common.paths import REPO
from generator.isa.amd64 import ISA as AMD64
from helpers.skips import require_tools

# Where the closure is not followed (docs/refusals.md): the panic path, and names kinst refuses anyway.
ENDS = {"panic", "vpanic"}
REFUSED_PREFIXES = ("dtrace_", "kinst_", "db_", "kdb_", "owner_")


def objdump_calls(image: Path) -> Dict[str, Set[str]]:
    """function -> the other functions objdump shows it calling or jumping to directly."""
    require_tools("objdump", why="the sample kernel's call graph is objdump's reading of it")
    text = subprocess.run(["objdump", "-d", "-w", "--no-show-raw-insn", str(image)], capture_output=True,
                          text=True, check=True).stdout
    graph: Dict[str, Set[str]] = {}
    func = ""
    for line in text.splitlines():
        head = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if head:
            func = head[1]
            graph.setdefault(func, set())
            continue
        m = re.search(r"\t(?:call|jmp|j[a-z]+)\s+[0-9a-f]+ <([^+>]+)(?:\+0x[0-9a-f]+)?>", line)
        if m and func and m[1] != func:
            graph[func].add(m[1])
    return graph


def closure(graph: Dict[str, Set[str]], entries) -> Set[str]:
    seen = {e for e in entries if e in graph}
    todo = deque(seen)
    while todo:
        f = todo.popleft()
        if f not in entries and (f in ENDS or f.startswith(REFUSED_PREFIXES) and not f.startswith("dtrace_safe_")):
            continue
        for c in graph.get(f, ()):
            if c not in seen:
                seen.add(c)
                todo.append(c)
    return seen - set(entries)


@pytest.fixture(scope="module")
def target(sample_kernel: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """kinst_target.c's exact-name exclusions for the sample kernel: name -> reason."""
    out = tmp_path_factory.mktemp("nmi")
    res = subprocess.run([sys.executable, "-m", "generator", "generate", "--provider", "kinst", "--kernel",
                          str(sample_kernel), "--function", "vm_fault", "--out", str(out)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr
    text = (out / "kinst_target.c").read_text()
    names = text.split("kinst_excluded_names[] = {", 1)[1].split("};", 1)[0]
    # { "name", "reason" "continued" ... }: adjacent literals are one string.
    return {m[0]: "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m[1]))
            for m in re.findall(r'\{\s*"([^"]+)",\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\}', names)}


def test_the_exclusion_list_holds_the_nmi_closure(sample_kernel: Path, target: Dict[str, str]) -> None:
    graph = objdump_calls(sample_kernel)
    expected = closure(graph, AMD64.nmi_entries)
    # The sample's path, as written: the closure is neither empty nor everything.
    assert {"stack_zero", "stack_put", "printf", "log", "kvprintf", "cnputc", "panic"} <= expected
    assert "kern_reboot" not in expected and "vm_fault" not in expected
    listed = {n for n, why in target.items() if "called directly on the NMI path" in why}
    assert listed == expected - set(AMD64.md_excluded)
    for name in listed:
        chain = re.search(r"on the NMI path ([\w >-]+?)(?: \(|;)", target[name])[1].split(" -> ")
        assert chain[0] in AMD64.nmi_entries and chain[-1] == name, target[name]
        assert all(b in graph[a] for a, b in zip(chain, chain[1:])), f"{chain}: not objdump's calls"


def test_probes_refuse_a_callee_of_the_nmi_path(sample_kernel: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "generator", "probes", "--kernel", str(sample_kernel), "--function",
                          "stack_zero"], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr
    assert ("function refused: excluded by name (amd64): called directly on the NMI path "
            "stack_capture -> stack_zero; it runs in NMI context") in res.stdout
    assert not re.search(r"\s(trampoline|call-direct|jmp32)\s*$", res.stdout, re.M)


def test_the_closure_is_made_before_the_workers_fork() -> None:
    """``probes --all`` forks a worker per CPU: the exclusion list (a pass over every function for the NMI entry
    points) is made in the parent, which the workers inherit, not once in each of them."""
    from generator.analysis import exclusions
    from generator.analysis.whole import analyse_image
    from generator.image.elf import KernelImage
    from helpers.skips import require_system_library

    img = KernelImage.open(str(require_system_library("libz.so.1")))
    assert img not in exclusions._IMAGES
    chunks = analyse_image(img, "any", True, True, jobs=2)
    try:
        assert next(chunks) and img in exclusions._IMAGES
    finally:
        chunks.close()
