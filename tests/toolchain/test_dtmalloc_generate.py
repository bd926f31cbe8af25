"""The dtmalloc provider: generated files deterministic, the module compiling as far as this machine allows.

``generate`` writes what varies with the target (dtmalloc_table.c,
dtmalloc_target.h, dtmalloc_abi.h, the listing and the types document); the
glue (dtmalloc.c) and the portable core (dtmalloc_core.[ch]) are hand-written
in sys/modules/dtmalloc/ and staged beside them, as ``invoke build --src``
does.  The portable core is compiled with gcc and with clang for FreeBSD
(-Wall -Wextra -Werror, freestanding, no headers) and run in user space
against Python's probe-name rule.  The FreeBSD glue, built with the stand-in
declarations of tests/fixtures/dtmalloc/stubsys/, runs over stand-in kernel
services (tests/fixtures/dtmalloc/glue_world.c: failed loads, a refused and a
good unload), and is built against a real FreeBSD sys/ tree when SYSDIR names
one (the test skips, naming SYSDIR, otherwise).  Compiling the glue against
FreeBSD 14.3's and 15's own headers, and its refusal of the other release's,
is tests/toolchain/test_real_headers.py.
"""

from __future__ import annotations

import filecmp
import re
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest

from generator.kmod.sources import source_dir, stage_sources
from generator.providers import PROVIDERS
from generator.common.paths import SYS_MODULES
from generator.providers.dtmalloc.mallocs import discover, probe_name
from helpers.dtmalloc_fixtures import (
    LAYOUT_12, RELEASE_12, RELEASE_14, Fixtures, assert_one_line_error, run_cli, shared,
)
from helpers.paths import DTMALLOC_FIXTURES
from helpers.skips import require_bsd_make, require_sysdir, require_tools

DTMALLOC = PROVIDERS["dtmalloc"]
GENERATED = ["dtmalloc.list", "dtmalloc_abi.h", "dtmalloc_table.c", "dtmalloc_target.h", "dtmalloc_types.md"]
PORTABLE = list(DTMALLOC.portable("amd64"))  # dtmalloc_core.c, dtmalloc_table.c
STRICT = ["-std=c99", "-ffreestanding", "-Wall", "-Wextra", "-Werror", "-pedantic"]
FREEBSD_CLANG = ["clang", "--target=x86_64-unknown-freebsd14.0", "-nostdinc", "-mcmodel=kernel", "-mno-red-zone",
                 "-fno-pic"]
STUBS = DTMALLOC_FIXTURES / "stubsys"
COMPILERS_WHY = "the portable core and the glue are compiled with gcc and with clang"


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Fixtures:
    return shared(tmp_path_factory)


@pytest.fixture(scope="module")
def inputs(fx: Fixtures):
    return str(fx.kernel(*RELEASE_14)), str(fx.module())


@pytest.fixture(scope="module")
def generated(inputs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "dtmalloc"
    kernel, module = inputs
    res = run_cli("generate", "--provider", "dtmalloc", "--kernel", kernel, "--module", module, "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(out / n) for n in GENERATED]
    return out


@pytest.fixture(scope="module")
def module(generated: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated files with the hand-written C and Makefile staged beside them."""
    out = tmp_path_factory.mktemp("module") / "dtmalloc"
    shutil.copytree(generated, out)
    stage_sources(DTMALLOC, out)
    return out


def _cc(argv: List[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True)


def test_same_inputs_give_identical_files(generated: Path, inputs, tmp_path: Path) -> None:
    copy = tmp_path / "first"
    shutil.copytree(generated, copy)
    kernel, module = inputs
    res = run_cli("generate", "--provider", "dtmalloc", "--kernel", kernel, "--module", module, "--out", str(generated))
    assert res.returncode == 0, res.stderr
    match, mismatch, errors = filecmp.cmpfiles(copy, generated, GENERATED, shallow=False)
    assert (mismatch, errors) == ([], []) and len(match) == len(GENERATED)
    for name in GENERATED:
        header = (generated / name).read_text().splitlines()
        assert any(kernel in line for line in header[:10]) and not any("Date" in line for line in header[:10])
        assert any(f"from templates/dtmalloc/{name}.j2" in line for line in header[:10]), name


def test_table_and_doc_hold_the_types(generated: Path, inputs) -> None:
    kernel, module = inputs
    d = discover(kernel, [module])
    core = (generated / "dtmalloc_table.c").read_text()
    probes = [line.split("\"")[1] for line in core.splitlines() if ".dk_probe = " in line]
    assert probes == sorted(t.probe for t in d.probed)
    assert '.dk_name = "tab\\011and newline\\012",' in core
    assert '.dk_symbol = "M_MODDEV@mod_a.c",' in core and '.dk_file = "mod_a.ko",' in core
    doc = (generated / "dtmalloc_types.md").read_text()
    assert doc.count("| `dtmalloc::") == len(d.types) == 11
    assert "duplicate: probes go to M_CACHE@subr_b.c in kernel" in doc
    listing = (generated / "dtmalloc.list").read_text().splitlines()
    assert listing[-1].split() == ["-", "dtmalloc", "temp", "free"]
    abi = (generated / "dtmalloc_abi.h").read_text()
    assert "CTASSERT(M_VERSION == 2020110501UL);" in abi
    assert "CTASSERT(__FreeBSD_version <= 1400097);" in abi
    assert "#define\tDTMALLOC_MTIP(mtp)\t(&mtp->ks_mti)" in abi
    target = (generated / "dtmalloc_target.h").read_text()
    assert f"#define\tDTMALLOC_NKNOWN\t\t\t{len(d.probed)}\n" in target
    assert "#define\tDTMALLOC_TARGET_M_VERSION\t2020110501UL" in target
    assert "mtip = DTMALLOC_MTIP(mtp);" in (source_dir(DTMALLOC) / "dtmalloc.c").read_text()


@pytest.mark.parametrize("cc", [["gcc"], FREEBSD_CLANG], ids=["gcc", "clang-freebsd"])
def test_core_compiles_freestanding(module: Path, cc: List[str], tmp_path: Path) -> None:
    require_tools(cc[0], why=COMPILERS_WHY)
    for src in PORTABLE:
        res = _cc([*cc, *STRICT, "-c", src, "-o", str(tmp_path / (src + ".o"))], module)
        assert res.returncode == 0, res.stderr
    portable = "".join((module / n).read_text() for n in (*PORTABLE, "dtmalloc_core.h", "dtmalloc_target.h"))
    # <sys/types.h> only in a FreeBSD kernel build (style(9)'s integer types).
    portable = re.sub(r"#ifdef \w+_SYS_TYPES\n#include <sys/types.h>\n.*?#else\n", "",
                      portable, flags=re.S)
    assert '#include "dtmalloc_target.h"' in portable and "#include <" not in portable


def test_core_runs_the_probe_name_rule(module: Path, inputs, tmp_path: Path) -> None:
    require_tools("gcc", why=COMPILERS_WHY)
    exe = tmp_path / "core_test"
    res = _cc(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I.", str(DTMALLOC_FIXTURES / "core_test.c"), *PORTABLE,
               "-o", str(exe)], module)
    assert res.returncode == 0, res.stderr
    d = discover(*inputs[:1], [inputs[1]])
    cases = [t.raw.decode() for t in d.types] + ["not a type", "x" * 300, "a\x0bb\x0cc\rd"]
    run = subprocess.run([str(exe), *cases], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    lines = run.stdout.splitlines()
    known = sorted(t.probe for t in d.probed)
    for case, line in zip(cases, lines):
        name, index = line.split("\t")
        assert name == probe_name(case.encode())
        assert int(index) == (known.index(name) if name in known else -1)
    assert lines[-1] == f"table {len(known)} ok"


@pytest.fixture(scope="module")
def glue_world(module: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The glue (dtmalloc.c) built with the stand-in headers into a program that runs it over stand-in
    kernel services (tests/fixtures/dtmalloc/glue_world.c), with the module's portable core linked in."""
    require_tools("gcc", why="the glue is run over stand-in kernel services built with gcc")
    work = tmp_path_factory.mktemp("world")
    flags = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
    res = _cc(["gcc", *flags, "-ffreestanding", "-nostdinc", "-D_KERNEL", f"-I{STUBS}", "-I.",
               "-DSTUB_FREEBSD_VERSION=1400097", "-DSTUB_M_VERSION=2020110501UL",
               "-c", str(DTMALLOC_FIXTURES / "glue_world.c"), "-o", str(work / "world.o")], module)
    assert res.returncode == 0, res.stderr
    exe = work / "glue_world"
    res = _cc(["gcc", *flags, "-I.", str(work / "world.o"), *PORTABLE, "-o", str(exe)], module)
    assert res.returncode == 0, res.stderr
    return exe


@pytest.mark.parametrize("scenario", ["hook-taken", "register-fails", "load-unload", "module-types"])
def test_glue_runs_over_standin_kernel_services(glue_world: Path, scenario: str) -> None:
    """A failed load never unregisters provider 0 nor clears a malloc(9) hook it did not set; a refused
    unload keeps the hook, a good one clears it.  A module's malloc types (module-types): its kldunload
    is refused while one of their probes is enabled; refused later, their probes stay usable; done, the
    module's memory faults and no enable or disable writes there again, and their probes are destroyed
    but the one an enabling holds."""
    run = subprocess.run([str(glue_world), scenario], capture_output=True, text=True, timeout=60)
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0 and re.fullmatch(rf"{scenario}: \d+ checks, 0 failed", lines[-1]), run.stdout
    if scenario == "module-types":
        start = lines.index("world: unload with a probe enabled")
        assert lines[start + 1 : lines.index("world: refused")] == [
            "dtmalloc: not unloading fixmod.ko: a dtmalloc probe of a malloc type it defines is enabled"]


def test_glue_against_sysdir(module: Path, tmp_path: Path) -> None:
    """The real build: bsd.kmod.mk against the FreeBSD sys/ tree in $SYSDIR."""
    sysdir = require_sysdir("sys/malloc.h", "the glue build against it is skipped")
    make = require_bsd_make("the glue build against $SYSDIR runs it")
    work = tmp_path / "build"
    shutil.copytree(module, work)
    res = subprocess.run([make, f"SYSDIR={sysdir}", "WITHOUT_CTF=yes"], cwd=work, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (work / "dtmalloc.ko").is_file()


def test_makefile_uses_bsd_kmod_mk() -> None:
    text = (SYS_MODULES / "dtmalloc" / "Makefile").read_text()
    assert ".include <bsd.kmod.mk>" in text
    # As the DTrace provider modules have it (sys/modules/dtrace/kinst/Makefile): OpenZFS's warning flags
    # for the OpenSolaris compatibility headers, after bsd.kmod.mk has set CWARNFLAGS.
    assert "CWARNFLAGS+=\t${OPENZFS_CWARNFLAGS}" in text.split(".include <bsd.kmod.mk>")[1]
    assert "KMOD=\tdtmalloc" in text
    srcs = " ".join(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("SRCS"))
    c_files = [n for n in srcs.split() if n.endswith(".c")]
    assert sorted(c_files) == ["dtmalloc.c", "dtmalloc_core.c", "dtmalloc_table.c"]
    # Each is hand-written and committed beside the Makefile, or generated: never both.
    for name in c_files:
        assert (name in DTMALLOC.plain()) != (name in GENERATED), name
        assert name in GENERATED or (source_dir(DTMALLOC) / name).is_file(), name


def test_default_out_and_sample_kernel(sample_kernel, tmp_path: Path) -> None:
    out = tmp_path / "o"
    res = run_cli("generate", "--provider", "dtmalloc", "--out", str(out))
    assert res.returncode == 0, res.stderr
    core = (out / "dtmalloc_table.c").read_text()
    assert '.dk_probe = "BIO_buffer",' in core and str(sample_kernel) in core


def test_freebsd_12_is_refused(fx: Fixtures, tmp_path: Path) -> None:
    k = str(fx.kernel(*RELEASE_12, *LAYOUT_12))
    assert_one_line_error(
        run_cli("generate", "--provider", "dtmalloc", "--kernel", k, "--out", str(tmp_path / "o")),
        "does not generate a dtmalloc provider for FreeBSD 12",
    )
    assert not (tmp_path / "o").exists()
