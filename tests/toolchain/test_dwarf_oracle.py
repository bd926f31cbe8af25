"""Source lines and inlined copies against LLVM's reading of the same DWARF: zero disagreements.

On every image with DWARF the tests have -- the embedded sample kernel
(clang, DWARF 4), Lua 5.4 from its Debian source package built with kernel
flags by gcc (DWARF 5) and by clang (DWARF 4), and the machine's libm with
its separate debug file (gcc, DWARF 5, compressed sections) -- every
instruction of every function, every site of every line with code and
every inlined copy is held to ``llvm-symbolizer --inlining`` and
``llvm-dwarfdump`` (``helpers.lineoracle``).  Each test also asserts it
checked enough to mean something.
"""

from __future__ import annotations

import pytest

from helpers.lineoracle import agreement


def _check(path, min_addresses: int, min_copies: int) -> None:
    got = agreement(str(path))
    assert not got.disagreements, "\n".join(got.disagreements[:40])
    assert got.addresses >= min_addresses and got.sites >= got.lines > 0, got[:4]
    assert got.copies >= min_copies, got[:4]


def test_sample_kernel_agrees(sample_kernel):
    _check(sample_kernel, 1500, 6)


def test_lua_gcc_dwarf5_agrees(lua_gcc):
    _check(lua_gcc, 40_000, 1_000)


def test_lua_clang_dwarf4_agrees(lua_clang):
    _check(lua_clang, 40_000, 1_000)


def test_machine_library_with_separate_debug_file_agrees(libm_debug):
    _check(libm_debug, 100_000, 1_000)


@pytest.mark.parametrize("wrong", ["line", "inlined", "copy"])
def test_the_oracle_sees_a_wrong_answer(sample_kernel, monkeypatch, wrong):
    """The comparison is not vacuous: a line off by one, a lost inlined frame, a moved range all show."""
    from generator.analysis.dwarfindex import DwarfIndex

    if wrong == "line":
        real = DwarfIndex.line_of

        def off_by_one(self, address):
            r = real(self, address)
            return r and (r[0], r[1] + 1, r[2])

        monkeypatch.setattr(DwarfIndex, "line_of", off_by_one)
    elif wrong == "inlined":
        monkeypatch.setattr(DwarfIndex, "inline_chain", lambda self, a: [])
    else:
        real_ranges = DwarfIndex.ranges_of_inline
        monkeypatch.setattr(DwarfIndex, "ranges_of_inline",
                            lambda self, i: [(lo, hi + 1) for lo, hi in real_ranges(self, i)])
    bad = agreement(str(sample_kernel)).disagreements
    assert bad and any(b.startswith(("line", "inlined", "--line", "copy", "return")) for b in bad), bad


@pytest.mark.slow
def test_the_c_library_agrees(libm_debug):
    """The whole of libc (its DWARF too in libc6-dbg's file): some 10x libm; slow, so only with --slow."""
    from helpers.corpus import find_system_library

    libc = find_system_library("libc.so.6")
    assert libc is not None, "libm is here, so libc is"
    _check(libc, 400_000, 4_000)
