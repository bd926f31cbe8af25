"""check-ko: offline checks of .ko files, on .ko-shaped objects that clang and ld.lld build here.

The fixtures (tests/fixtures/ko/) restate FreeBSD's module records without
FreeBSD headers: a good module that depends on the kernel, dtrace and
opensolaris; the same with an unresolved symbol, with a call to a kernel
*local*, without its SYSINIT, and built for aarch64; dependency modules of
version 1 and 2; and kernel-like images of two releases.  Each bad one must
be caught with one line naming the symbol, section or record.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from generator.kmod.checkko import check_ko, kernel_facts, read_metadata
from generator.common.errors import UserError
from generator.image.elf import KernelImage
from generator.common.paths import REPO
from helpers import kofixtures, skips


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> kofixtures.KoFixtures:
    return kofixtures.shared(tmp_path_factory)


def check_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", "check-ko", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def deps_args(paths: List[Path]) -> List[str]:
    return [w for p in paths for w in ("--dep-module", str(p))]


def failure_lines(res: subprocess.CompletedProcess) -> List[str]:
    return [ln for ln in res.stderr.splitlines() if ln.strip()]


def test_good_module_passes_and_lists_its_records(fx) -> None:
    res = check_cli(str(fx.module()), "--kernel", str(fx.kernel()), *deps_args(fx.dependencies()))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stderr == ""
    out = res.stdout
    assert "module kkfixture" in out
    assert "version kkfixture 3" in out
    assert "depends on kernel 1400097..1499999 (preferred 1400097)" in out
    assert "depends on dtrace 1 (preferred 1)" in out and "depends on opensolaris 1 (preferred 1)" in out
    assert "1 in dtrace.ko" in out and "2 in kernel" in out  # dtrace_register; printf, module_register_init
    assert "weak, left 0 by the loader: kk_optional_hook" in out
    assert "NOT CHECKED" not in out and "check-ko: ok" in out
    # __start_/__stop_ of the module's own linker set are the loader's job, not unresolved symbols.
    assert "__start_set_kkfixture_items" not in out


def test_records_are_read_through_relocations(fx) -> None:
    img = KernelImage.open(str(fx.module()))
    records = read_metadata(img)
    assert [(r.kind, r.name) for r in records] == [
        ("depend", "kernel"), ("module", "kkfixture"), ("version", "kkfixture"), ("depend", "dtrace"),
        ("depend", "opensolaris"),
    ]
    assert [r.version for r in records if r.kind == "version"] == [3]
    # In the file every pointer field is 0; only the RELA entries give these values.
    sec = next(s for s in img.sections if s.name == "set_modmetadata_set")
    assert not any(KernelImage.open(str(fx.module()))._data[sec.offset : sec.offset + sec.size])


def test_unchecked_dependencies_are_reported_not_passed(fx) -> None:
    res = check_cli(str(fx.module()), "--kernel", str(fx.kernel()))
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if "NOT CHECKED" in ln)
    assert "dtrace_register" in line and "dtrace, opensolaris" in line and "--dep-module" in line
    assert "check-ko: ok, with unchecked dependencies" in res.stdout


def test_unresolved_symbol_is_one_line_naming_it(fx) -> None:
    res = check_cli(str(fx.module("-DFIXTURE_UNRESOLVED")), "--kernel", str(fx.kernel()),
                    *deps_args(fx.dependencies()))
    assert res.returncode == 1
    lines = failure_lines(res)
    assert len(lines) == 1, res.stderr
    assert "undefined symbol kk_no_such_function" in lines[0]
    assert "the kernel, dtrace.ko, opensolaris.ko" in lines[0]


def test_a_kernel_local_is_not_an_export(fx) -> None:
    res = check_cli(str(fx.module("-DFIXTURE_CALLS_LOCAL")), "--kernel", str(fx.kernel()),
                    *deps_args(fx.dependencies()))
    assert res.returncode == 1
    lines = failure_lines(res)
    assert len(lines) == 1 and "undefined symbol kernel_local_helper" in lines[0], res.stderr


def test_wrong_architecture_is_one_line_naming_the_machine(fx) -> None:
    skips.require_tools("clang", "ld.lld", why=kofixtures.WHY)
    arm = fx.module(arch="aarch64")
    res = check_cli(str(arm), "--kernel", str(fx.kernel()))
    assert res.returncode == 1
    lines = failure_lines(res)
    assert len(lines) == 1, res.stderr
    assert "machine EM_AARCH64" in lines[0] and "EM_X86_64" in lines[0] and str(arm) in lines[0]


def test_missing_sysinit_is_caught(fx) -> None:
    res = check_cli(str(fx.module("-DFIXTURE_NO_SYSINIT")), "--kernel", str(fx.kernel()),
                    *deps_args(fx.dependencies()))
    assert res.returncode == 1
    lines = failure_lines(res)
    assert any("set_sysinit_set" in ln for ln in lines), res.stderr
    assert all(ln.startswith("check-ko: ") for ln in lines)


def test_dependency_version_outside_the_range(fx) -> None:
    res = check_cli(str(fx.module()), "--kernel", str(fx.kernel()), *deps_args(fx.dependencies(version=2)))
    assert res.returncode == 1
    lines = failure_lines(res)
    assert len(lines) == 2, res.stderr  # dtrace and opensolaris
    assert any("depends on dtrace 1..1, but" in ln and "version 2" in ln for ln in lines)


def test_kernel_of_another_release(fx) -> None:
    res = check_cli(str(fx.module()), "--kernel", str(fx.kernel(osreldate=1303000)), *deps_args(fx.dependencies()))
    assert res.returncode == 1
    lines = failure_lines(res)
    assert len(lines) == 1, res.stderr
    assert "depends on kernel 1400097..1499999, but the target kernel has version 1303000" in lines[0]


def test_dependencies_are_found_next_to_the_kernel(fx, tmp_path: Path) -> None:
    """The default search path is the kernel's directory, as /boot/kernel holds dtrace.ko."""
    import shutil

    d = tmp_path / "boot" / "kernel"
    d.mkdir(parents=True)
    shutil.copy(fx.kernel(), d / "kernel")
    for dep in fx.dependencies():
        shutil.copy(dep, d / dep.name)
    report = check_ko(str(fx.module()), kernel_facts(KernelImage.open(str(d / "kernel"))))
    assert report.ok and not report.assumed
    assert report.resolved["dtrace_register"] == "dtrace.ko"


def test_no_module_records_at_all(fx, tmp_path: Path) -> None:
    skips.require_tools("clang", "ld.lld", why=kofixtures.WHY)
    src = tmp_path / "plain.c"
    src.write_text("int plain_function(int);\nint plain_function(int x) { return x + 1; }\n")
    ko = kofixtures.link_module(tmp_path, "plain.ko", [kofixtures.compile_c(tmp_path, str(src))])
    report = check_ko(str(ko), kernel_facts(KernelImage.open(str(fx.kernel()))))
    assert not report.ok
    assert any("no section set_modmetadata_set" in f for f in report.failures)
    assert any("no section set_sysinit_set" in f for f in report.failures)


def test_json_report(fx) -> None:
    res = check_cli(str(fx.module()), "--kernel", str(fx.kernel()), "--json", *deps_args(fx.dependencies()))
    assert res.returncode == 0, res.stderr
    (rep,) = json.loads(res.stdout)
    assert rep["ok"] and rep["modules"] == ["kkfixture"]
    assert {"name": "dtrace", "minimum": 1, "preferred": 1, "maximum": 1} in rep["depends"]
    assert rep["versions"] == [{"name": "kkfixture", "version": 3}]
    assert rep["resolved"]["printf"] == "kernel"


def test_not_an_elf_file_is_bad_input(fx, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.ko"
    bogus.write_text("not a module\n")
    res = check_cli(str(bogus), "--kernel", str(fx.kernel()))
    assert res.returncode == 2
    lines = failure_lines(res)
    assert len(lines) == 1 and "not an ELF file" in lines[0] and "Traceback" not in res.stderr
    with pytest.raises(UserError, match="no such file"):
        check_ko(str(tmp_path / "missing.ko"), kernel_facts(KernelImage.open(str(fx.kernel()))))
