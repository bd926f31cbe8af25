"""Malloc-type discovery on FreeBSD-shaped fixtures the tests build (tests/fixtures/dtmalloc/).

The fixtures are compiled with clang for x86_64-unknown-freebsd14.0 and
linked with ld.lld into an ET_EXEC kernel-like image and ET_REL modules, with
the real struct malloc_type / struct sysinit layouts of FreeBSD 12, 13 and 14
and the TSLOG shim.  The expected types are written out by hand in
tests/helpers/dtmalloc_fixtures.py from the C sources, not computed by the code under
test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from generator.providers.dtmalloc import layouts as L
from generator.common.errors import UserError
from generator.providers.dtmalloc.mallocs import discover, probe_name
from helpers.dtmalloc_fixtures import (
    KERNEL_TYPES, LAYOUT_12, LAYOUT_13, MODULE_TYPES, RELEASE_12, RELEASE_13, RELEASE_14, Fixtures,
    assert_one_line_error, run_cli, shared,
)


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Fixtures:
    return shared(tmp_path_factory)


@pytest.fixture(scope="module")
def kernel(fx: Fixtures) -> str:
    return str(fx.kernel(*RELEASE_14))


@pytest.fixture(scope="module")
def module(fx: Fixtures) -> str:
    return str(fx.module())


def _rows(d, kernel: str):
    return [(t.name, t.probe, t.symbol, t.binding, "kernel" if t.file == kernel else "module") for t in d.types]


def test_lists_the_fixture_types_exactly(kernel: str, module: str) -> None:
    d = discover(kernel, [module])
    assert _rows(d, kernel) == KERNEL_TYPES + MODULE_TYPES
    assert d.version.release == "14.0-RELEASE" and d.version.osreldate == 1400097
    assert d.version.source == "osreldate"
    assert d.layout.sysinit.name == "stailq" and d.layout.malloc_type.name == "ks_version"
    assert d.layout.ident == 2020110501


def test_static_types_are_local_with_their_source_file(kernel: str) -> None:
    d = discover(kernel)
    caches = [t for t in d.types if t.symbol == "M_CACHE"]
    assert [(t.binding, t.source) for t in caches] == [("local", "subr_a.c"), ("local", "subr_b.c")]
    assert caches[0].address != caches[1].address
    assert caches[0].qualified == "M_CACHE@subr_a.c"


def test_duplicates_name_the_type_stock_dtmalloc_probes(kernel: str, module: str) -> None:
    d = discover(kernel, [module])
    by = {(t.symbol, t.source, t.file): t for t in d.types}
    a_cache = by[("M_CACHE", "subr_a.c", kernel)]
    b_cache = by[("M_CACHE", "subr_b.c", kernel)]
    assert a_cache.duplicate_of == b_cache.ref() and b_cache.duplicate_of is None
    # "foo bar" and "foo_bar" collide only after whitespace becomes '_'.
    assert by[("M_FOOBAR", None, kernel)].duplicate_of == by[("M_FOO_BAR", None, kernel)].ref()
    # A module loaded later registers later: its "devbuf" wins over the kernel's.
    assert by[("M_DEVBUF", None, kernel)].duplicate_of == by[("M_MODDEV", "mod_a.c", module)].ref()
    assert sorted(t.probe for t in d.probed) == sorted({r[1] for r in KERNEL_TYPES + MODULE_TYPES})


def test_descriptions_with_whitespace_and_the_length_limit(kernel: str) -> None:
    d = discover(kernel)
    probes = {t.name: t.probe for t in d.types}
    assert probes["BIO buffer"] == "BIO_buffer"
    assert probes["tab\tand newline\n"] == "tab_and_newline_"
    long = next(t for t in d.types if t.symbol == "M_LONG")
    assert len(long.probe) == L.DTRACE_FUNCNAMELEN - 1 and len(long.name) > len(long.probe)
    assert probe_name(b"a\x0bb\x0cc\rd e") == "a_b_c_d_e"


def test_module_pointers_exist_only_in_relocations(kernel: str, module: str) -> None:
    with open(module, "rb") as f:
        elf = ELFFile(f)
        assert elf["e_type"] == "ET_REL"
        index = next(i for i, sec in enumerate(elf.iter_sections()) if sec.name == "set_sysinit_set")
        sset = elf.get_section(index)
        assert sset["sh_size"] > 0 and sset.data() == bytes(sset["sh_size"])
        rela = [sec for sec in elf.iter_sections() if sec["sh_type"] == "SHT_RELA" and sec["sh_info"] == index]
        assert len(rela) == 1 and rela[0].num_relocations() == sset["sh_size"] // 8
        symtab = elf.get_section_by_name(".symtab")
        targets = set()
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_RELA":
                continue
            for r in sec.iter_relocations():
                sym = symtab.get_symbol(r["r_info_sym"])
                targets.add(sym.name or elf.get_section(sym["st_shndx"]).name)
        assert "malloc_init" in targets  # the kernel's function: undefined in the module
        assert ".rodata.str1.1" in targets  # ks_shortdesc: section + addend
    d = discover(kernel, [module])
    assert [t.symbol for t in d.types if t.file == module] == ["M_MODA", "M_MODDEV"]


def test_wrong_ks_version_is_reported(kernel: str, fx: Fixtures) -> None:
    bad = str(fx.module("-DFIXTURE_BAD_VERSION=2024073001UL"))  # 15.x's M_VERSION, the kernel is 14
    d = discover(kernel, [bad])
    stale = next(t for t in d.types if t.symbol == "M_STALE")
    assert stale.version_mismatch and (stale.ident, stale.expected_ident) == (2024073001, 2020110501)
    assert stale not in d.probed
    assert any("M_STALE" in w and "2024073001" in w and "panics" in w for w in d.warnings)
    res = run_cli("malloc-types", "--kernel", kernel, "--module", bad, "--json")
    assert res.returncode == 0, res.stderr
    objs = [json.loads(line) for line in res.stdout.splitlines()]
    assert next(o for o in objs if o["symbol"] == "M_STALE")["version_mismatch"] == {
        "found": 2024073001, "expected": 2020110501}
    assert all("version_mismatch" not in o for o in objs if o["symbol"] != "M_STALE")
    assert "warning:" in res.stderr and "M_STALE" in res.stderr


def test_unregistered_lookalike_is_flagged(kernel: str) -> None:
    d = discover(kernel)
    assert "M_ORPHAN" not in {t.symbol for t in d.types}
    assert any("M_ORPHAN" in w and "no SYSINIT registers it" in w for w in d.warnings)


@pytest.mark.parametrize(
    "flags, release, sysinit, malloc_type, ident",
    [
        (RELEASE_13 + LAYOUT_13, "13.2-RELEASE", "array", "ks_version", 2020110501),
        (RELEASE_12 + LAYOUT_12, "12.4-RELEASE", "array", "ks_magic", L.M_MAGIC),
        (RELEASE_14 + ("-DTSLOG",), "14.0-RELEASE", "stailq", "ks_version", 2020110501),
    ],
    ids=["13-array", "12-magic", "14-tslog"],
)
def test_other_layouts(fx: Fixtures, flags, release, sysinit, malloc_type, ident) -> None:
    k = str(fx.kernel(*flags))
    d = discover(k)
    assert (d.version.release, d.layout.sysinit.name, d.layout.malloc_type.name, d.layout.ident) == (
        release, sysinit, malloc_type, ident)
    assert sorted(t.symbol for t in d.types) == sorted(r[2] for r in KERNEL_TYPES)
    assert all(t.tslog == ("-DTSLOG" in flags) for t in d.types)


@pytest.mark.parametrize(
    "flags, label, major",
    [((), "FreeBSD 14.0 or newer", 14), (LAYOUT_13, "FreeBSD 13 (or 14-CURRENT before 2023)", 13),
     (LAYOUT_12, "FreeBSD 12 or older", 12)],
    ids=["14", "13", "12"],
)
def test_release_from_layouts_without_osreldate(fx: Fixtures, flags, label, major) -> None:
    d = discover(str(fx.kernel(*flags)))
    assert (d.version.source, d.version.release, d.version.major, d.version.osreldate) == (
        "layouts", label, major, None)
    assert len(d.types) == len(KERNEL_TYPES)


def test_module_for_another_layout_is_refused(kernel: str, fx: Fixtures) -> None:
    old = str(fx.module(*LAYOUT_13))
    with pytest.raises(UserError, match="struct sysinit layout differs from the kernel's"):
        discover(kernel, [old])


# -- the command line ------------------------------------------------------


def test_json_has_the_documented_keys(kernel: str, module: str) -> None:
    res = run_cli("malloc-types", "--kernel", kernel, "--module", module, "--json")
    assert res.returncode == 0, res.stderr
    objs = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(o["name"], o["probe"], o["symbol"], o["binding"]) for o in objs] == [
        r[:4] for r in KERNEL_TYPES + MODULE_TYPES]
    base = {"name", "probe", "symbol", "binding", "file", "address"}
    for o in objs:
        assert set(o) in (base, base | {"duplicate_of"})
        assert o["file"] in (kernel, module) and isinstance(o["address"], int)
    dup = next(o for o in objs if o["symbol"] == "M_DEVBUF")["duplicate_of"]
    assert dup["symbol"] == "M_MODDEV" and dup["file"] == module


def test_text_output(kernel: str, module: str) -> None:
    res = run_cli("malloc-types", "--kernel", kernel, "--module", module)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"{kernel}: 14.0-RELEASE (osreldate 1400097)")
    assert lines[1].split() == ["PROBE", "SYMBOL", "BINDING", "FILE", "ADDRESS", "SHORTDESC"]
    bio = next(line for line in lines if line.startswith("dtmalloc::BIO_buffer:"))
    assert bio.split()[1:4] == ["M_BIOBUF@subr_a.c", "local", "kernel"] and bio.endswith('"BIO buffer"')
    assert "    duplicate probe name: stock dtmalloc gives dtmalloc::devbuf: to M_MODDEV@mod_a.c in " + module in lines
    assert lines[-1] == "11 malloc types in 2 files: 8 probe names, 3 duplicates, 0 ks_version mismatches"


def test_dtrace_l_style_listing(kernel: str, module: str) -> None:
    res = run_cli("malloc-types", "--kernel", kernel, "--module", module, "--list")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "   ID   PROVIDER            MODULE                          FUNCTION NAME"
    assert len(lines) == 1 + 2 * 8
    # Newest first, as dtmalloc's provide walks the list: the module's types lead.
    assert lines[1].split() == ["-", "dtmalloc", "devbuf", "malloc"]
    assert lines[2].split() == ["-", "dtmalloc", "devbuf", "free"]
    assert lines[3].split() == ["-", "dtmalloc", "mod_a_buffers", "malloc"]


def test_default_is_the_sample_kernel(sample_kernel) -> None:
    res = run_cli("malloc-types", "--json")
    assert res.returncode == 0, res.stderr
    objs = [json.loads(line) for line in res.stdout.splitlines()]
    names = {o["name"] for o in objs}
    assert {"devbuf", "BIO buffer", "cache", "selfd"} <= names
    assert all(o["file"] == str(sample_kernel) for o in objs)
    assert sum(1 for o in objs if "duplicate_of" in o) == 1


# -- bad input ----------------------------------------------------------------


def test_no_sysinit_set(fx: Fixtures) -> None:
    k = str(fx.kernel(sources=("no_sysinit.c",)))
    assert_one_line_error(run_cli("malloc-types", "--kernel", k), "no set_sysinit_set section")


def test_no_malloc_types(fx: Fixtures) -> None:
    k = str(fx.kernel(sources=("no_types.c",)))
    assert_one_line_error(run_cli("malloc-types", "--kernel", k), "no malloc types", "calls malloc_init")


def test_unsupported_release(fx: Fixtures) -> None:
    k = str(fx.kernel("-DFIXTURE_OSRELDATE=1103000", '-DFIXTURE_VERSION="FreeBSD 11.3-RELEASE"'))
    assert_one_line_error(
        run_cli("malloc-types", "--kernel", k), "unsupported layout version", "osreldate 1103000", "FreeBSD 12 to 15")


def test_unsupported_malloc_type_layout(fx: Fixtures) -> None:
    k = str(fx.kernel(*RELEASE_14, "-DFIXTURE_M_VERSION=12345UL"))
    assert_one_line_error(
        run_cli("malloc-types", "--kernel", k), "unsupported struct malloc_type layout", "0x3039")


def test_not_an_elf_and_a_kernel_as_module(tmp_path: Path, kernel: str) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"not elf")
    assert_one_line_error(run_cli("malloc-types", "--kernel", str(junk)), "not an ELF file")
    assert_one_line_error(run_cli("malloc-types", "--kernel", kernel, "--module", kernel), "not a .ko module")
