"""The bsd.kmod.mk reader: conditions, modifiers and .PATH, as bmake reads them.

``invoke build`` evaluates a tree's kern.mk and a module's Makefile with
``generator.kmod.mk``; these tests give it make text directly, so nothing is
compiled.  tests/toolchain/test_build.py runs it on the stand-in trees.
"""

from __future__ import annotations

import pytest

from generator.kmod.mk import MkReader, MkUnsupported


def test_mk_reader_conditions_and_modifiers() -> None:
    mk = MkReader({"COMPILER_TYPE": "clang", "COMPILER_VERSION": "140006", "MACHINE_CPUARCH": "amd64",
                   "CC": "/usr/bin/clang --target=x", "LD": "ld.lld"})
    mk.read("\n".join([
        "A=\t1 -Ia -Ib 2",
        ".if ${COMPILER_TYPE} == \"gcc\"",
        "B= gcc",
        ".elif ${COMPILER_VERSION} >= 100000 && !defined(NOPE)",
        "B= new-clang",
        ".else",
        "B= old-clang",
        ".endif",
        "C= ${A:M-I*} ${A:N-I*}",
        "D= ${LATER}",
        "LATER= late",
        "E+= one",
        "E+= two",
        ".if empty(UNSET) && ${CC:[1]:T} == \"clang\" && ${MK_FOO} == \"no\"",
        "F?= yes",
        ".endif",
        "G:= ${LATER2}x",
        "LATER2= not-seen",
    ]))
    assert mk.expand("${B}") == "new-clang"
    assert mk.expand("${C}") == "-Ia -Ib 1 2"
    assert mk.expand("${D}") == "late"  # = expands when used, as in bmake
    assert mk.expand("${E}") == "one two"
    assert mk.expand("${F}") == "yes" and mk.defaulted == {"MK_FOO"}
    assert mk.expand("${G}") == "x"  # := expands at once
    for bad in (".for x in a b\n.endfor", ".if target(foo)\n.endif", "X= ${A:Q}\nY:= ${X}", ".if 1\n.error no",
                ".PATH ${X}"):
        with pytest.raises(MkUnsupported):
            MkReader({}).read(bad)


def test_mk_reader_records_path() -> None:
    """.PATH is a special target bmake searches for sources: expanded when read, appended, cleared when empty."""
    mk = MkReader({".CURDIR": "/m", "MACHINE_CPUARCH": "amd64"})
    mk.read("\n".join([
        ".PATH:\t\t${.CURDIR}/${MACHINE_CPUARCH}",
        "MACHINE_CPUARCH= i386",  # too late: a .PATH line is expanded as it is read
        ".PATH.c: /c1",
        ".if ${MACHINE_CPUARCH} == \"arm64\"",
        ".PATH: /not-taken",
        ".endif",
        ".PATH: /x /y",
    ]))
    assert mk.search_path(".c") == ["/c1", "/m/amd64", "/x", "/y"]
    assert mk.search_path(".h") == ["/m/amd64", "/x", "/y"]
    mk.read(".PATH:")
    assert mk.search_path(".c") == ["/c1"]


def test_builtin_kern_flags_are_freebsd_14s() -> None:
    """The cross build's fallback when a tree's kern.mk cannot be read is kern.mk as FreeBSD 14 evaluates it
    for amd64 and clang -- the same flags, in the same order, as the tests' own spelling of the kmod line:
    no -Wredundant-decls/-Wnested-externs (gone from CWARNFLAGS), CSTD gnu99."""
    from generator import isa
    from generator.kmod.kmodflags import builtin_kern_flags
    from helpers.kmod import KERN_MK

    assert list(builtin_kern_flags(isa.by_name("amd64"))) == KERN_MK
