"""The tiers, and the shared fixtures: the embedded sample kernel and the real-world corpora.

Every test lives in one tier's folder and gets that tier's marker here, so
``pytest -m unit`` (or ``invoke test --tier unit``) selects by folder:

* ``unit/``: pure Python, fast: no compiler, no external tool, no download,
  no sample kernel;
* ``toolchain/``: compilers (clang, lld, gcc), binutils, valgrind, system
  libraries, the embedded sample kernel, the Debian .ko corpus;
* ``vm/``: QEMU and a guest that boots, or a boot fully simulated.

Every fixture whose input can be missing skips with a reason that names the
input (``helpers.skips``); none of them fakes one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

import pytest

from generator.common.paths import REPO
from helpers import skips
from helpers.paths import TESTS, TIERS

# What the unit tier must not use: each needs a compiler or a download.
NOT_FOR_UNIT = {"sample_kernel", "debian_modules", "dtmalloc_listing", "lua_gcc", "lua_clang", "libm_debug"}


def pytest_configure(config: pytest.Config) -> None:
    """The tests find the repository through the imported ``generator``: it must be this checkout's.

    The commands the tests start (``python -m generator ...``) find it the same way, from any folder:
    the installed distribution is ``kinstkit``, and names no top-level ``generator``.
    """
    if REPO.resolve() != config.rootpath.resolve():
        raise pytest.UsageError(f"generator is imported from {REPO}, not from this checkout ({config.rootpath}): "
                                f"run with PYTHONPATH={config.rootpath}")
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), path) if p)


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Mark every test with its tier, the folder it is in; refuse a test outside the tiers
    and a unit test that asks for what the unit tier must not need."""
    for item in items:
        parts = item.path.resolve().relative_to(TESTS).parts
        tier = parts[0] if len(parts) > 1 else None
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: tests live in tests/{{{','.join(TIERS)}}}/, one folder per tier")
        item.add_marker(getattr(pytest.mark, tier))
        if tier == "unit" and NOT_FOR_UNIT & set(item.fixturenames):
            needs = ", ".join(sorted(NOT_FOR_UNIT & set(item.fixturenames)))
            raise pytest.UsageError(f"{item.nodeid} uses {needs}: it belongs in tests/toolchain/ or tests/vm/")


@pytest.fixture(scope="session")
def sample_kernel() -> Path:
    """The embedded sample kernel, built once per session."""
    skips.require_sample_toolchain()
    from generator.image.sample import sample_kernel as build

    return build()


@pytest.fixture(scope="session")
def debian_modules() -> List[Path]:
    """A deterministic selection of Debian's linux-image .ko modules.

    The 30 largest (most code) plus every 100th by name, so the selection
    covers big drivers and a spread of small ones.
    """
    from helpers.corpus import debian_kernel_modules

    mods = sorted(debian_kernel_modules())
    largest = sorted(mods, key=lambda p: p.stat().st_size, reverse=True)[:30]
    spread = mods[::100]
    return sorted(set(largest) | set(spread))


@pytest.fixture(scope="session")
def dtmalloc_listing(sample_kernel, tmp_path_factory) -> Path:
    """The `dtrace -l`-style dtmalloc listing kinstkit predicts for the sample kernel.

    Generated here, so tests never depend on files a developer happened to
    leave in sys/modules/dtmalloc/.
    """
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("dtmalloc")
    subprocess.run(
        [sys.executable, "-m", "generator", "generate", "--provider", "dtmalloc", "--kernel", str(sample_kernel),
         "--out", str(out)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    listing = out / "dtmalloc.list"
    assert listing.exists()
    return listing


@pytest.fixture(scope="session")
def lua_gcc() -> Path:
    """Lua 5.4 from its Debian source package, gcc -O2 -g with kernel flags: DWARF 5, real inlining."""
    from helpers.debsrc import debian_image

    return debian_image("gcc")


@pytest.fixture(scope="session")
def lua_clang() -> Path:
    """The same with clang -gdwarf-4: DWARF 4 and .debug_ranges."""
    from helpers.debsrc import debian_image

    return debian_image("clang-dwarf4")


@pytest.fixture(scope="session")
def libm_debug() -> Path:
    """The machine's libm, whose DWARF is in a separate debug file found by build-id (libc6-dbg)."""
    from helpers.debsrc import machine_library_with_debug_file

    return machine_library_with_debug_file()
