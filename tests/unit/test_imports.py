"""The import graph: no cycles anywhere, and each package imports only what its place in the pipeline allows.

The graph is built with ``ast`` from every module of ``generator/`` and
``vm/``, function-local imports included, so a local import cannot hide a
cycle.  An edge goes to the module an import names: ``from a.b import c``
is an edge to ``a.b.c`` when that is a module, else to ``a.b``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

from generator.common.paths import REPO

PACKAGES = ("generator", "vm")


def _modules() -> Dict[str, Path]:
    out = {}
    for top in PACKAGES:
        for path in sorted((REPO / top).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: Dict[str, Path]) -> Set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                target = f"{mod}.{a.name}"
                if target in known:
                    out.add(target)
                elif mod in known:
                    out.add(mod)
    out.discard(name)
    return out


def graph() -> Dict[str, Set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def _cycle(g: Dict[str, Set[str]]) -> List[str]:
    """One import cycle of ``g`` as a path, or [] when there is none."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(n: str) -> List[str]:
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return []

    for n in sorted(g):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return []


def test_the_graph_sees_the_packages():
    g = graph()
    assert "generator.cli" in g and "generator.isa.amd64.classify" in g and "vm.runner" in g
    assert "generator.analysis.probes" in g["generator.analysis.whole"]


def test_no_import_cycles():
    cycle = _cycle(graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_vm_uses_only_generator_common():
    for name, deps in graph().items():
        if name.startswith("vm"):
            bad = sorted(d for d in deps if d.startswith("generator") and not d.startswith("generator.common"))
            assert not bad, f"{name} imports {bad}; vm/ may import only generator.common"


# Which stages a package may import: the pipeline flows one way.  ``cli``
# and ``bench`` sit on top and may use anything.
ALLOWED = {
    "generator.common": {"generator.common"},
    # The ISA packages render their portable core's header (kinst_encoding.h) for the host build of it.
    "generator.isa": {"generator.common", "generator.isa", "generator.render"},
    "generator.image": {"generator.common", "generator.isa", "generator.image"},
    "generator.analysis": {"generator.common", "generator.isa", "generator.image", "generator.analysis"},
    "generator.render": {"generator.common", "generator.render"},
    "generator.verify": {"generator.common", "generator.isa", "generator.image", "generator.analysis"},
    "generator.providers": {"generator.common", "generator.isa", "generator.image", "generator.analysis",
                            "generator.render", "generator.providers"},
    "generator.dscript": {"generator.common", "generator.isa", "generator.image", "generator.analysis",
                          "generator.render", "generator.providers", "generator.dscript"},
    "generator.kmod": {"generator.common", "generator.isa", "generator.image", "generator.analysis",
                        "generator.render", "generator.providers", "generator.kmod"},
    "generator.run": {"generator.common", "generator.isa", "generator.image", "generator.analysis",
                      "generator.render", "generator.providers", "generator.run"},
}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_stages_import_only_earlier_stages(package):
    allowed = ALLOWED[package] | {"generator"}
    for name, deps in graph().items():
        if name == package or name.startswith(package + "."):
            for d in deps:
                top = ".".join(d.split(".")[:2])
                assert top in allowed or d in allowed, f"{name} imports {d}"


def test_arch_neutral_code_imports_no_isa_package():
    """Only generator/isa/ and the ISA's own tests name an ISA package; the rest ask the image.

    The ISA-neutral modules of generator/isa/ (the contract, the host build of
    the portable core, the encodings) are not ISA packages."""
    from generator.isa import SUPPORTED

    for name, deps in graph().items():
        if name.startswith("generator.isa"):
            continue
        isa_packages = sorted(d for d in deps if d.startswith("generator.isa.") and d.split(".")[2] in SUPPORTED)
        assert not isa_packages, f"{name} imports {isa_packages}"


def test_the_accelerator_is_a_record_the_graph_sees():
    """An ISA's accelerator is an ``Accelerator`` record it imports, not a module named by a string."""
    from generator import isa

    g = graph()
    assert "generator.isa.hostcore" in g["generator.isa.amd64"]
    assert "generator.isa.amd64.walk" in g["generator.isa.amd64"]
    for name in isa.SUPPORTED:
        acc = isa.by_name(name).accelerator
        assert acc is None or type(acc).__name__ == "Accelerator"


# String literals of arch-neutral code that may name an ISA, and why.  Anything else that names one
# fails: an ISA's facts belong to its Isa record, so that adding an ISA is one folder and one line.
ISA_NAMES_ALLOWED = {
    ("generator/image/sample.py", "amd64"): "the embedded sample kernel's C is written for amd64",
    ("generator/run/ring0/packages.py", "amd64"): "the ring-0 guest's pinned Debian kernel packages are amd64's",
}


def _isa_words() -> Set[str]:
    """Every name the registry's ISAs go by: kinstkit's, FreeBSD's MACHINE*, clang's, Debian's, GNU's."""
    from generator import isa

    words: Set[str] = set()
    for name in isa.SUPPORTED:
        i = isa.by_name(name)
        k, o = i.kmod, i.oracle
        words |= {i.name, k.machine, k.machine_arch, k.machine_cpuarch, k.clang_arch, o.debian_arch,
                  o.gnu_triple.split("-")[0]}
    return {w for w in words if w}


def _string_literals(path: Path):
    """(line, text) of every string constant of the module that is not a docstring."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            yield n.lineno, n.value


def isa_names_in(path: Path, words: Set[str]) -> List[str]:
    """The ISA names the module's string literals hold ("iced-x86", a library, and ELF's EM_/R_ names aside)."""
    import re

    pattern = re.compile(r"(?<![A-Za-z0-9])(?<!EM_)(?<!R_)("
                         + "|".join(sorted(map(re.escape, words), key=len, reverse=True)) + r")(?![A-Za-z0-9])")
    rel = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name
    found = []
    for line, text in _string_literals(path):
        for m in pattern.finditer(text.replace("iced-x86", "")):
            if (rel, m.group(1)) not in ISA_NAMES_ALLOWED:
                found.append(f"{rel}:{line}: {m.group(1)!r} in {text[:60]!r}")
    return found


def test_arch_neutral_code_names_no_isa() -> None:
    words = _isa_words()
    assert {"amd64", "arm64", "aarch64", "riscv64", "x86_64"} <= words
    found = [f for p in sorted((REPO / "generator").rglob("*.py"))
             if p.relative_to(REPO).parts[1] != "isa" for f in isa_names_in(p, words)]
    assert not found, "ISA names outside generator/isa/ (put the fact in the ISA's record):\n" + "\n".join(found)


def test_the_isa_name_scan_finds_one(tmp_path: Path) -> None:
    words = _isa_words()
    mod = tmp_path / "probe.py"
    mod.write_text('"""A docstring may say amd64."""\nR = "R_X86_64_PC32"\n'
                   'FLAGS = ["-m", "elf_x86_64_fbsd", "--target=aarch64"]\n')
    assert [f.split(": ", 1)[1].split(" ")[0] for f in isa_names_in(mod, words)] == ["'x86_64'", "'aarch64'"]


def test_the_package_imports_itself_relatively() -> None:
    """Installed, generator/ is ``kinstkit`` (setup.py): an absolute ``generator`` import would fail there."""
    absolute = []
    for path in sorted((REPO / "generator").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            absolute += [f"{path.relative_to(REPO)}:{node.lineno}" for n in names
                         if n == "generator" or n.startswith("generator.")]
    assert not absolute, "absolute imports of generator: " + ", ".join(absolute)


def test_one_place_opens_an_image() -> None:
    """Stages are handed images or ask ``image.open_image``; only it calls ``KernelImage.open``."""
    callers = []
    for path in sorted((REPO / "generator").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "open"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "KernelImage"):
                callers.append(str(path.relative_to(REPO)))
    assert callers == ["generator/image/__init__.py"], callers


# The modules every `probes --all --summary` imports that define typed records.  typing.NamedTuple turns each
# string annotation into a ForwardRef and compile()s it at import; with `from __future__ import annotations`
# that was 28M of the 457M instructions of libstdc++'s whole summary (callgrind, stop 28).
_EAGER_RECORDS = ("isa/contract.py", "isa/hostcore.py", "isa/immediates.py", "isa/amd64/probe_md.py",
                  "image/headers.py", "image/symbols.py", "image/sections.py", "image/relocations.py",
                  "analysis/records.py")


def test_the_summary_paths_records_have_evaluated_annotations() -> None:
    """The start-up cost above stays paid once: these modules keep their annotations evaluated."""
    lazy = [name for name in _EAGER_RECORDS
            if any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                   for node in ast.parse((REPO / "generator" / name).read_text()).body)]
    assert not lazy, f"from __future__ import annotations is back in {lazy}: see _EAGER_RECORDS"
