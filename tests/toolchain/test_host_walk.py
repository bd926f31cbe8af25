"""The host walk (``isa/hostcore.py``) against the decoder of record, on real and on mutated code.

kinst's rule for one instruction has one implementation, the portable
core's (``kinst_core_dissect()``), which the walk and the per-function
report (``probes.analyse``) both run.  What the walk adds is where each
instruction ends and what its mnemonic is -- from an opcode table derived
from capstone (``opmap.py``), or from capstone's C library -- and which
functions it leaves to Python.  The report finds the same through
capstone's Python binding and ``decode.py``'s corrections, so every summary
and table record of the walk must equal the report's: on real code nobody
here wrote and on mutated code.  The table must carry the work, and what
Python decides must be handed back.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys

import pytest

from generator.analysis.plan import plan_function
from generator.analysis.probes import analyse, code_runs
from generator.common.errors import UserError
from generator.image.elf import KernelImage
from generator.isa import by_name, hostcore
from generator.isa.amd64 import ISA as amd64
from generator.isa.amd64 import opmap
from helpers.hostwalk import mutated_walk, summary_mismatches
from helpers.skips import require_system_library, require_tool
from helpers.textimage import lay_out, mutated_bodies


def _lib():
    return hostcore.host(amd64.name)


def _mismatches(img, funcs, rule: str):
    """Functions whose summary (record and ``--json`` line, which the library formats itself) or table records
    differ between the walk and the report."""
    lib = _lib()
    bad = summary_mismatches(img, funcs, rule)
    for f in funcs:
        rep = analyse(img, f, rule, img.isa)
        if plan_function(img, f, rule, lib) != plan_function(img, f, rule, None, rep):
            bad.append((f.name, "table records", plan_function(img, f, rule, None, rep)))
    return bad


@pytest.mark.parametrize("name, rule, limit", [("libz.so.1", "any", 0), ("libz.so.1", "first", 0),
                                               ("libcrypto.so.3", "any", 2500)])
def test_real_libraries(name, rule, limit):
    img = KernelImage.open(str(require_system_library(name)))
    funcs = img.functions()[:limit] if limit else img.functions()
    assert len(funcs) > 50
    bad = _mismatches(img, funcs, rule)
    assert not bad, bad[:3]


def test_sample_kernel_and_debian_modules(sample_kernel, debian_modules):
    """The sample's zoo (every kind, refusals by name and by bytes, %gs regions) and Debian's modules (ET_REL,
    relocated, a table record per relocated field)."""
    modules = [m for m in debian_modules if m.stat().st_size < 1_000_000][:30]
    total = 0
    for path in [sample_kernel, *modules]:
        img = KernelImage.open(str(path))
        funcs = img.functions()
        bad = _mismatches(img, funcs, "any")
        assert not bad, (path.name, bad[:3])
        total += len(funcs)
    assert len(modules) == 30 and total > 1000


def test_mutated_code():
    """Real functions with bytes changed and prefixes inserted: the walk's summary and records are the report's,
    or the walk handed the function back; where the report stops (capstone and the core disagree on a %rip
    operand), the walk must have handed it back too."""
    bodies = mutated_bodies(str(require_system_library("libcrypto.so.3")), 3000, seed=20261203)
    img, funcs = lay_out(amd64, bodies)
    lib = _lib()

    def same_plan(f, rep):
        assert plan_function(img, f, "any", lib) == plan_function(img, f, "any", None, rep), f.name

    walked = mutated_walk(img, funcs, bodies, same_plan)
    assert walked > 0.3 * len(funcs)


def test_the_table_carries_the_work():
    """On a real library capstone decodes few instructions of a summary: the table gives the rest, and hands back
    almost no function."""
    img = KernelImage.open(str(require_system_library("libstdc++.so.6")))
    lib = _lib()
    decoded = lib.lib.kk_amd64_decoded
    decoded.restype = ctypes.c_ulong
    lay = lib.summary_layout()
    before, n, deferred = decoded(), 0, 0
    funcs = img.functions()
    for run, span, first in code_runs(img, funcs):
        counts = lib.summarise(span, first, [funcs[k].address - first for k in run], [funcs[k].size for k in run])
        col = counts[lay.n :: lay.columns]
        deferred += sum(1 for x in col if x == lay.deferred)
        n += sum(x for x in col if x != lay.deferred)
    assert n > 100000 and deferred < 0.01 * len(funcs)
    assert decoded() - before < 0.01 * n


@pytest.mark.parametrize("hexcode, why", [
    ("5506c3", "(bad): capstone cannot decode it"),
    ("55670fb9c0c3", "ud1 after 0x67, a length the table does not know: decode.py corrects capstone's"),
    ("558ee80f30c3", "a %gs load opens a region Python refuses"),
    ("5548", "the last instruction runs past the symbol"),
])
def test_hands_back_what_python_decides(hexcode, why):
    code = bytes.fromhex(hexcode)
    lib = _lib()
    lay = lib.summary_layout()
    counts = lib.summarise(code + b"\xcc" * 15, 0, [0], [len(code)])
    assert counts[lay.n] == lay.deferred, why


@pytest.mark.parametrize("hexcode", ["550fb9c0c3", "e9000000000fb9cc", "55660fb984c80000000001ffc3"])
def test_ud0_ud1_walked_at_decode_py_length(hexcode):
    """capstone reads ud0/ud1 two bytes long; decode.py corrects that, and so does the table (opmap.py takes
    decode.py's length): the walk does these functions itself (vmlinux has 686 static-call trampolines, jmp
    then ud1), and its summary, --json line and table records are the report's."""
    code = bytes.fromhex(hexcode)
    img, funcs = lay_out(amd64, [code])
    lay = _lib().summary_layout()
    counts = _lib().summarise(code + b"\xcc" * 15, 0, [0], [len(code)])
    assert counts[lay.n] != lay.deferred
    assert not _mismatches(img, funcs, "any")


@pytest.mark.parametrize("hexcode", ["5564ff10c3", "5565ff10c3", "55" + "2e" * 12 + "7410c3", "55f2f2ff10c3",
                                     "556666ff10c3", "55f0f0ff00c3"])
def test_prefixes_the_table_is_not_keyed_on(hexcode):
    """The table keeps a class's verdict as its probes found it, with the prefixes it is keyed on each once;
    a segment prefix or a repeated one can change it (a call through %fs memory is refused, a short jump
    with a dozen prefixes cannot be widened), so for those the walk asks the core: summary and table records
    are the report's."""
    img, funcs = lay_out(amd64, [bytes.fromhex(hexcode)])
    assert not _mismatches(img, funcs, "any")


def test_every_prefix_and_modrm_form_at_capstones_length():
    """The step reads prefixes, REX and the ModR/M, SIB and displacement bytes through tables of its own
    (``kk_lead[]``, ``kk_modrm[]``): ``mov r/m, reg`` (8b /r) under each legacy prefix the table is keyed on, a
    few it is not, and REX, with every ModR/M byte and SIB bytes with and without base 5, walks at
    capstone's lengths (the Python binding's), and the table gives every one of them (capstone decodes none)."""
    import capstone

    cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    code, sizes = bytearray(), []
    for pfx in ("", "66", "f2", "f3", "66f3", "f066", "2e", "36", "3e", "26", "64", "65", "2e2e"):
        for rex in ("", "48", "4c"):
            for modrm in range(256):
                sibs = (0x24, 0x25, 0x65, 0xE5) if modrm >> 6 != 3 and modrm & 7 == 4 else (None,)
                for sib in sibs:
                    b = bytes.fromhex(pfx + rex) + bytes([0x8B, modrm]) + bytes([sib] if sib is not None else []) + \
                        bytes(range(0x11, 0x21))
                    insn = next(cs.disasm(b, 0x1000), None)
                    if insn is not None:
                        code += b[: insn.size]
                        sizes.append(insn.size)
    lib = _lib()
    decoded = lib.lib.kk_amd64_decoded
    decoded.restype = ctypes.c_ulong
    before = decoded()
    rows = lib.rows(bytes(code) + b"\xcc" * 15, len(code), 0x1000, hostcore.TEXT_NONE)
    assert rows is not None and rows.n == len(sizes) > 10000
    assert list(rows.data[lib.fields["kr_len"].offset :: lib.rowsize]) == sizes
    assert decoded() == before


def test_a_table_record_needs_no_capstone_text():
    """A table walk keeps the reasons of refused instructions, which need capstone's mnemonic: the walk asks
    capstone for those alone."""
    code = bytes.fromhex("55 fb 4889e5 f4 5d c3".replace(" ", ""))  # push; sti; mov; hlt; pop; ret
    rows = _lib().rows(code + b"\xcc" * 15, len(code), 0x1000)
    assert rows is not None and rows.n == 6
    assert sorted(rows.reasons) == [1, 3] and rows.reasons[1].startswith("sti: ") and rows.reasons[3].startswith("hlt: ")


_LAZY_CAPSTONE = """
import sys
from generator.isa import by_name, hostcore

def mapped():
    return "libcapstone" in open("/proc/self/maps").read()

lib = hostcore.for_isa(by_name("amd64"))
lay = lib.summary_layout()
code = bytes.fromhex("554889e55dc3")  # push; mov; pop; ret: the table knows every one
counts = lib.summarise(code + b"\\xcc" * 15, 0, [0], [len(code)])
print(counts[lay.n], mapped())
code = bytes.fromhex("55fb5dc3")  # sti is refused by name: its reason needs capstone's mnemonic
rows = lib.rows(code + b"\\xcc" * 15, len(code), 0x1000)
print(rows.reasons[1].split(":")[0], mapped())
"""


def test_capstone_is_loaded_only_when_a_walk_needs_it():
    """The library is not linked to capstone: a summary the table does alone never maps it (9.6 MB, 2 ms of
    start-up), and the first instruction that needs its text loads it.  A fresh process, read from
    /proc/self/maps, since this one may have capstone's Python binding loaded."""
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps (Linux) to see what a process has mapped")
    _lib()  # built here, so the child only loads it
    proc = subprocess.run([sys.executable, "-c", _LAZY_CAPSTONE], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["4 False", "sti True"]


@pytest.mark.parametrize("cc", ["gcc", "clang"])
@pytest.mark.parametrize("arch", ["amd64", "arm64", "riscv"])
def test_compiles_cleanly(cc, arch, tmp_path):
    """The whole library of each ISA, warnings as errors, C99, as isa/hostcore.py builds it (capstone's own
    header included)."""
    require_tool(cc, cc, "compile the host library with warnings as errors")
    isa = by_name(arch)
    hostcore.render_headers(isa, tmp_path)
    cmd = hostcore.compile_command(isa, cc, tmp_path, (*hostcore.FLAGS, "-Wall", "-Wextra", "-Werror"))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / hostcore.LIB_NAME).stat().st_size > 0


def test_without_a_compiler_the_analysis_says_so_in_one_line(tmp_path, monkeypatch):
    """No cc, gcc or clang: one line on stderr that says what to install, exit 2, nothing left in the cache."""
    lib = str(require_system_library("libz.so.1"))
    env = dict(os.environ, PATH=str(tmp_path / "bin"), KINSTKIT_CACHE=str(tmp_path / "cache"))
    env.pop("CC", None)
    proc = subprocess.run([sys.executable, "-m", "generator", "probes", "--kernel", lib, "--all", "--summary"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "no C compiler" in proc.stderr and "install gcc" in proc.stderr
    assert not list((tmp_path / "cache").rglob("*.so"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(UserError, match="no C compiler"):
        hostcore._compiler()


def _committed_table():
    text = opmap.HEADER.read_text()
    top_text = text[text.index("kk_top[") : text.index("};", text.index("kk_top["))]
    rows_text = text[text.index("kk_cells[") :]
    top = [int(v, 16) for v in re.findall(r"0x([0-9a-f]{4})", top_text)]
    rows = [tuple(int(v, 16) for v in re.findall(r"0x([0-9a-f]{4})", block))
            for block in re.findall(r"\{([^{}]*)\}", rows_text)]
    return top, rows


def test_committed_table_matches_capstone_on_a_sample():
    """A spread of classes derived again from capstone equal the committed table (the whole of it: slow)."""
    top, rows = _committed_table()
    assert len(top) == opmap.NKEYS
    prober = opmap._Prober()
    sample = {m: list(range(m, 256, 41)) for m in range(len(opmap.MAPS))}
    sample[0] += [0xFF, 0x8E, 0xE8, 0x75, 0xFB, 0x9D]  # calls (far ones too), %ss loads, rel32, jcc, sti, popf
    sample[1] += [0x01, 0x05, 0x84]  # the 0f 01 group (swapgs), syscall, jcc rel32
    checked = 0
    for m, opcodes in sample.items():
        for op in opcodes:
            if op in opmap._NOT_OPCODES.get(m, ()):
                continue
            for pfx in (0, 1):
                for rex in range(len(opmap.REX)):
                    entry = top[opmap.key(m, op, pfx, rex, 0)]
                    cells = list(rows[entry & 0x7FFF]) if entry & 0x8000 else [entry] * opmap.CELLS
                    assert cells == opmap._class_cells(prober, m, op, pfx, rex, 0), (m, hex(op), pfx, rex)
                    checked += 1
    assert checked > 150


@pytest.mark.slow
def test_committed_table_is_capstones():
    """``python3 -m generator.isa.amd64.opmap`` would write the committed table byte for byte."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = opmap.write(*opmap.build(), Path(tmp))
        assert path.read_text() == opmap.HEADER.read_text()


def test_kk_init_refuses_a_vocabulary_of_another_layout():
    """``struct kk_vocab`` is restated as a ctypes.Structure: kk_init() checks the size Python says it has and
    touches nothing when it is not its own (the walk keeps the vocabulary it has)."""
    lib = _lib()
    wrong = hostcore._KkVocab(ctypes.sizeof(hostcore._KkVocab) - 8)
    assert lib.lib.kk_init(ctypes.byref(wrong)) == hostcore.INIT_LAYOUT
    assert not _mismatches(*lay_out(amd64, [bytes.fromhex("554889e5fb5dc3")]), "any")
