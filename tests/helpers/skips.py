"""Skip helpers: a test whose input is missing skips, and says which input.

Each ``require_*`` returns the input when it is there (a tool's path, a
library, a tree) and otherwise skips the calling test with a reason that
names what is missing and, for software, the Debian package that has it.
None of them fakes an input.  Call them from the test or fixture that needs
the input, so that only what really depends on it is skipped; the skip is
reported at that caller's line (the helpers hide their own frames).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn, Optional

import pytest

if TYPE_CHECKING:
    from generator.image.sample import Toolchain
    from vm.images.standin import StandinAssets

# The Debian package of each tool the tests run, for the skip reasons.
DEBIAN_PACKAGES = {
    "as": "binutils", "ld": "binutils", "objcopy": "binutils", "objdump": "binutils", "readelf": "binutils",
    "strip": "binutils",
    "awk": "mawk", "clang": "clang", "cpio": "cpio", "gcc": "gcc", "ld.lld": "lld", "script": "util-linux",
    "valgrind": "valgrind", "qemu-system-x86_64": "qemu-system-x86", "xorriso": "xorriso",
}


def missing(reason: str) -> NoReturn:
    """Skip the calling test; ``reason`` names the missing input."""
    __tracebackhide__ = True
    pytest.skip(reason)
    raise AssertionError("unreachable")  # for type checkers: skip raises


def require_tool(name: str, package: Optional[str], why: str) -> str:
    """The path of command-line tool ``name``; else skip naming it, its Debian package and why it is needed.

    ``package`` is None for a tool no Debian package provides (FreeBSD's own).
    """
    __tracebackhide__ = True
    path = shutil.which(name)
    if path is None:
        where = f"apt-get install {package}" if package else "no Debian package provides it"
        missing(f"{name} not installed ({where}): {why}")
    return path


def require_tools(*names: str, why: str) -> None:
    """Every tool in ``names``; else skip naming each missing one and its Debian package."""
    __tracebackhide__ = True
    absent = [n for n in names if shutil.which(n) is None]
    if absent:
        packages = " ".join(sorted({DEBIAN_PACKAGES[n] for n in absent}))
        missing(f"{' and '.join(absent)} not installed (apt-get install {packages}): {why}")


def require_system_library(name: str) -> Path:
    """A 64-bit ELF shared library of this system (e.g. ``libcrypto.so.3``), resolved; else skip naming it."""
    __tracebackhide__ = True
    from helpers.corpus import LIBRARY_DIRS, find_system_library

    path = find_system_library(name)
    if path is None:
        missing(f"system library {name} not found in {', '.join(LIBRARY_DIRS)}; install the package that ships it")
    return path


def require_sysdir(header: str, why: str) -> Path:
    """The FreeBSD ``sys/`` tree ``$SYSDIR`` names, holding ``header``; else skip naming SYSDIR and the header."""
    __tracebackhide__ = True
    sysdir = os.environ.get("SYSDIR")
    if not sysdir or not (Path(sysdir) / header).is_file():
        missing(f"SYSDIR is not set to a FreeBSD sys/ tree (needs {header}); {why}")
    return Path(sysdir).resolve()


def require_bsd_make(why: str) -> str:
    """A BSD make to run bsd.kmod.mk: bmake, or make on FreeBSD; else skip naming bmake."""
    __tracebackhide__ = True
    make = shutil.which("bmake") or shutil.which("make")
    if make is None or (Path(make).name == "make" and os.uname().sysname != "FreeBSD"):
        missing(f"no BSD make (apt-get install bmake) to run bsd.kmod.mk: {why}")
    return make


def require_freebsd_host(why: str) -> None:
    """Run only on FreeBSD; elsewhere skip saying this host is not one."""
    __tracebackhide__ = True
    if os.uname().sysname != "FreeBSD":
        missing(f"{why} needs a FreeBSD host (this is {os.uname().sysname})")


def require_other_than_freebsd(why: str) -> None:
    """Run only where the host is not FreeBSD: ``why`` says what FreeBSD does instead."""
    __tracebackhide__ = True
    if os.uname().sysname == "FreeBSD":
        missing(f"on FreeBSD {why}")


def require_root(why: str) -> None:
    """Run only as root; else skip saying what needs it."""
    __tracebackhide__ = True
    if os.geteuid() != 0:
        missing(f"{why} needs root (running as uid {os.geteuid()})")


def require_env(name: str, why: str) -> str:
    """The value of environment variable ``name``; else skip naming it and what it is for."""
    __tracebackhide__ = True
    value = os.environ.get(name)
    if not value:
        missing(f"{name} is not set: {why}")
    return value


def require_python_package(module: str, distribution: str) -> ModuleType:
    """An optional Python module of the ``test`` extras; else skip naming its distribution."""
    __tracebackhide__ = True
    return pytest.importorskip(module, reason=f"{distribution} is not installed (pip install -e '.[test]')")


def require_sample_toolchain(name: Optional[str] = None) -> "Toolchain":
    """The toolchain the embedded sample kernel is built with (``name`` forces one); else skip naming its tools."""
    __tracebackhide__ = True
    from generator.common.errors import UserError
    from generator.image.sample import find_toolchain

    try:
        return find_toolchain(name)
    except UserError as e:
        packages = {"clang": "clang lld", "gcc": "gcc binutils"}
        install = packages.get(name or "", "clang lld, or gcc binutils")
        missing(f"{e} (apt-get install {install})")


def require_qemu() -> str:
    """qemu-system-x86_64, which boots the VM tier's guests; else skip naming it and its Debian package."""
    __tracebackhide__ = True
    return require_tool("qemu-system-x86_64", "qemu-system-x86", "the VM runner's QEMU backend boots the guest with it")


def require_standin_assets() -> "StandinAssets":
    """The stand-in guest's kernel, initramfs and system disk, built (and downloaded) on first use; else skip."""
    __tracebackhide__ = True
    from vm.config import VMError
    from vm.images import standin

    try:
        return standin.assets()
    except VMError as e:
        missing(f"stand-in guest inputs missing (the linux-image package, busybox-static): {e}")


def require_ring0_inputs() -> None:
    """What `vm-test --guest linux` needs before it boots: QEMU, kbuild's tools, lz4, and the pinned Debian
    kernel packages and QEMU's plugin header (downloaded on first use); else skip naming what is missing."""
    __tracebackhide__ = True
    from generator.common.errors import UserError
    from generator.run.ring0 import kernel, packages

    require_qemu()
    for tool, package in (("make", "make"), ("gcc-12", "gcc-12"), ("lz4", "lz4"), ("dpkg", "dpkg")):
        require_tool(tool, package, "vm-test --guest linux builds and boots a Debian kernel's module with it")
    try:
        kernel.assets()
        packages.fetch_source_member(packages.QEMU_SOURCE)
    except UserError as e:
        missing(f"the ring-0 guest's pinned Debian packages cannot be had: {e}")


def require_seed_tool() -> str:
    """The tool that makes a FreeBSD guest's cloud-init seed ISO; else skip naming it."""
    __tracebackhide__ = True
    from vm.images import freebsd

    tool = freebsd.seed_tool()
    if tool is None:
        missing("xorriso (or genisoimage) not installed (apt-get install xorriso): "
                "the FreeBSD guest's cloud-init seed ISO is made with it")
    return tool
