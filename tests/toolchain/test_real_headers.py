"""The modules against FreeBSD's own headers: those FreeBSD 14.3 and 15.0 install, from the ziglang wheels.

``helpers.freebsd_headers`` lays the headers out as a ``sys/`` tree, with
stand-ins (each marked as one) only for what FreeBSD does not install: the
build machinery, the CDDL ``sys/dtrace.h``, the OpenSolaris compatibility
headers and OpenZFS's ``ccompile.h``.  For each release, with the embedded
sample kernel built for that release (``KINSTKIT_SAMPLE_RELEASE``):

* every C file of both modules -- hand-written and generated -- compiles with
  the kmod line in bsd.kmod.mk's order (``helpers.kmod``) under clang
  ``-Werror``, with kern.mk's C standard of 14.x (gnu99) and with gnu17;
* the dtmalloc glue refuses the other release's tree at compile time (its
  CTASSERTs on M_VERSION and __FreeBSD_version);
* ``invoke build`` of the default kernel against the tree makes both
  ``.ko`` files and check-ko accepts them, the kernel's version included.

Each test skips, naming the wheel, when PyPI cannot be reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from generator.kmod.sources import stage_sources
from generator.providers import PROVIDERS
from generator.common.paths import REPO
from generator.image.elf import KernelImage
from generator.image.sample import ENV_RELEASE, sample_kernel
from helpers.freebsd_headers import RELEASES, sys_tree
from helpers.kmod import KERN_MK, kmod_cflags, prepare_objdir
from helpers.skips import require_sample_toolchain, require_tools

WHY = "the modules are compiled with clang against FreeBSD's headers (vnode_if.h made with awk)"
NAMES = sorted(RELEASES)  # "14.3", "15.0"
# Each module's C files (SRCS of its Makefile), as staged: hand-written and generated.
C_FILES = {
    "kinst": ["amd64/kinst_core.c", "amd64/kinst_core_jump.c", "amd64/kinst_isa.c", "kinst.c", "kinst_funcs.c",
              "kinst_table.c", "kinst_target.c", "kinst_tramp.c"],
    "dtmalloc": ["dtmalloc.c", "dtmalloc_core.c", "dtmalloc_table.c"],
}


def generator(*args: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "SYSDIR"}
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "generator", *args], capture_output=True, text=True, cwd=REPO,
                          env=environ, timeout=900)


@pytest.fixture(scope="module", params=NAMES)
def release(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def tree(release: str) -> Path:
    require_tools("clang", "ld.lld", "awk", why=WHY)
    return sys_tree(release)


@pytest.fixture(scope="module")
def modules(release: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both modules generated for the sample kernel of ``release`` and staged with their hand-written C."""
    require_sample_toolchain("clang")
    kernel = sample_kernel(release=release)
    out = tmp_path_factory.mktemp(f"modules-{release}")
    for name in PROVIDERS:
        res = generator("generate", "--provider", name, "--kernel", str(kernel), *(["--all"] if name == "kinst" else []),
                        "--out", str(out / name), env={})
        assert res.returncode == 0, res.stderr
        stage_sources(PROVIDERS[name], out / name)
    return out


def compile_module(tree: Path, release: str, module: Path, obj: Path, kern_mk: List[str]) -> Dict[str, str]:
    """Compile every C file of ``module``; the failures, as file -> compiler output."""
    prepare_objdir(tree, obj)
    includes = [module, module / "amd64"] if (module / "amd64").is_dir() else [module]
    argv = kmod_cflags(tree, obj, includes, RELEASES[release].triple, kern_mk)
    failed = {}
    for src in C_FILES[module.name]:
        res = subprocess.run([*argv, "-c", str(module / src), "-o", str(obj / (Path(src).stem + ".o"))],
                             cwd=obj, capture_output=True, text=True)
        if res.returncode != 0:
            failed[src] = res.stderr
    return failed


def test_the_tree_is_the_releases(release: str, tree: Path) -> None:
    rel = RELEASES[release]
    assert f"#define __FreeBSD_version {rel.osreldate}\t/* restored */" in (tree / "sys" / "param.h").read_text()
    assert f"#define\tM_VERSION\t{rel.m_version}" in (tree / "sys" / "malloc.h").read_text()
    assert (tree / "amd64" / "include" / "cpufunc.h").is_file() and (tree / "x86" / "include" / "x86_var.h").is_file()
    # The stand-ins say they are; FreeBSD's own headers carry its license, not our marker.
    assert "Stand-in" in (tree / "cddl/contrib/opensolaris/uts/common/sys/dtrace.h").read_text()
    assert "stand-in" not in (tree / "sys" / "malloc.h").read_text().lower()


@pytest.mark.parametrize("cstd", ["gnu99", "gnu17"])
def test_every_module_source_compiles_with_the_kmod_line(tree: Path, release: str, modules: Path, cstd: str,
                                                         tmp_path: Path) -> None:
    """kern.mk's CSTD: gnu99 in 14.x; gnu17 is what newer kern.mk's give, so both are compiled."""
    kern_mk = [f for f in KERN_MK if not f.startswith("-std=")] + [f"-std={cstd}"]
    # Every amd64 source; arm64/, riscv/ and their shared dbp/ compile for their own targets
    # (tests/toolchain/test_arch_glue.py).
    other_isas = {"arm64", "riscv", "dbp"}
    assert sorted(str(p.relative_to(modules / m)) for m in PROVIDERS for p in (modules / m).rglob("*.c")
                  if p.relative_to(modules / m).parts[0] not in other_isas) == \
        sorted(f for files in C_FILES.values() for f in files)
    for name in PROVIDERS:
        failed = compile_module(tree, release, modules / name, tmp_path / name, kern_mk)
        assert failed == {}, "\n".join(f"{src}:\n{err}" for src, err in failed.items())


def test_dtmalloc_refuses_the_other_releases_tree(release: str, modules: Path, tmp_path: Path) -> None:
    """Generated for one release's kernel, the glue's CTASSERTs stop a build against the other's headers."""
    other = next(n for n in NAMES if n != release)
    other_tree = sys_tree(other)
    prepare_objdir(other_tree, tmp_path / "obj")
    argv = kmod_cflags(other_tree, tmp_path / "obj", [modules / "dtmalloc"], RELEASES[other].triple)
    res = subprocess.run([*argv, "-c", str(modules / "dtmalloc" / "dtmalloc.c"), "-o", str(tmp_path / "x.o")],
                         cwd=tmp_path / "obj", capture_output=True, text=True)
    assert res.returncode != 0
    assert f"M_VERSION == {RELEASES[release].m_version}UL" in res.stderr and "compile-time assertion failed" in res.stderr


def test_build_of_the_default_kernel_makes_both_checked_modules(tree: Path, release: str, tmp_path: Path) -> None:
    """`invoke build --sysdir TREE` with the sample kernel of the same release: two .ko files, both passing
    check-ko, the kernel dependency's range held against the kernel's osreldate."""
    rel = RELEASES[release]
    out = tmp_path / "build"
    res = generator("build", "--sysdir", str(tree), "--out", str(out), "--src", str(tmp_path / "src"),
                    env={ENV_RELEASE: release})
    assert res.returncode == 0, res.stdout + res.stderr
    kernel = sample_kernel(release=release)
    bid = KernelImage.open(str(kernel)).build_id
    for name in PROVIDERS:
        ko = out / bid / f"{name}.ko"
        assert ko.is_file(), res.stdout
        report = json.loads((out / bid / f"{name}.json").read_text())["check_ko"]
        assert report["ok"] and report["failures"] == []
        kernel_dep = next(d for d in report["depends"] if d["name"] == "kernel")
        assert (kernel_dep["minimum"], kernel_dep["maximum"]) == (rel.osreldate, rel.major * 100000 + 99999)
        assert not any("records no version" in n for n in report["notes"])
    assert res.stdout.count("check-ko: ok") == 2
    shutil.rmtree(out)
