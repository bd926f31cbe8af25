"""Debian's apt, the way kinstkit fetches packages: binary ``.deb`` files and source packages.

Two things go through here: ``apt-get download NAME=VERSION`` of a binary
package (the system's own package lists), and ``apt-get source
--download-only`` of a source package through a private copy of the
machine's apt source list turned into ``deb-src`` entries, with private
package lists and cache, so that the system's own lists stay untouched.
Every failure is one ``UserError`` line that says what to do.

Users: the benchmark's Debian source packages (``generator/bench/debsrc.py``)
and the ring-0 guest's pinned kernel packages and QEMU's source
(``generator/run/ring0/packages.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import List

from .errors import UserError
from .tools import first_error

APT_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
APT_LIST = Path("/etc/apt/sources.list")
TIMEOUT = 900.0  # seconds any one apt or dpkg command may take


def run(argv: List[str], cwd: Path, what: str) -> str:
    """Run an apt or dpkg command; its stdout, or a UserError naming ``what`` and apt's first error."""
    env = dict(os.environ, LC_ALL="C", DEBIAN_FRONTEND="noninteractive")
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except FileNotFoundError:
        raise UserError(f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"{what}: {argv[0]} took more than {TIMEOUT:.0f} s") from None
    if proc.returncode != 0:
        raise UserError(f"{what}: {Path(argv[0]).name} failed: {first_error(proc.stderr or proc.stdout)}")
    return proc.stdout


def source_list() -> str:
    """The machine's apt sources as ``deb-src`` entries (deb822 or one-line format)."""
    if APT_SOURCES.is_file():
        return re.sub(r"(?m)^Types:\s*deb\s*$", "Types: deb-src", APT_SOURCES.read_text())
    if APT_LIST.is_file():
        return re.sub(r"(?m)^deb\s", "deb-src ", APT_LIST.read_text())
    raise UserError(f"no apt source list ({APT_SOURCES} or {APT_LIST}) to fetch Debian sources from")


def private_options(package: str, work: Path) -> List[str]:
    """apt-get options for a private deb-src source list, package lists and cache under ``work``."""
    if shutil.which("apt-get") is None:
        raise UserError(f"Debian source package {package}: apt-get is not installed (not a Debian system)")
    text = source_list()
    listing = work / ("src.sources" if "Types:" in text else "src.list")
    listing.write_text(text)
    for d in ("lists/partial", "cache/archives/partial"):
        (work / d).mkdir(parents=True, exist_ok=True)
    opts = [
        "-o", f"Dir::Etc::SourceList={listing}", "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={work / 'lists'}", "-o", f"Dir::Cache={work / 'cache'}",
    ]
    return opts + _sandbox_options()


def _sandbox_options() -> List[str]:
    # As root, apt drops to its _apt user to download, which cannot write our private directories.
    return ["-o", "APT::Sandbox::User=root"] if os.geteuid() == 0 else []


def download_binary(name: str, version: str, into: Path) -> Path:
    """``apt-get download NAME=VERSION`` into ``into``; the .deb, or one line saying what to do.

    A version the archive no longer carries (Debian's security suite keeps
    only the newest kernel) is reported as such, with how to move the pin.
    """
    what = f"Debian package {name} {version}"
    try:
        run(["apt-get", *_sandbox_options(), "download", f"{name}={version}"], into, what)
    except UserError as e:
        if "not found" in str(e) or "Unable to locate" in str(e) or "Can't select" in str(e):
            raise UserError(
                f"{what} is no longer in the archive (apt-get update; `apt-cache policy {name}` shows what is): "
                f"move the pin in generator/run/ring0/packages.py to a version it has, with the SHA256 "
                f"`apt-cache show {name}=VERSION` prints") from None
        raise
    debs = sorted(into.glob(f"{name.partition(':')[0]}_*.deb"))  # "libllvm15:arm64" is saved as libllvm15_*_arm64.deb
    if not debs:
        raise UserError(f"{what}: apt-get download left no .deb")
    return debs[0]
