"""The pinned Debian packages of the ring-0 guest, fetched once per version into the cache.

The guest is Debian 12's Linux 6.1 cloud kernel: its image (the bzImage that
boots, and the virtio modules the meta disk needs), its ``-dbg`` twin (the
vmlinux with symbols the table is made from), and the headers and kbuild
that build a module for it.  Each is pinned to one version and the SHA256 of
its ``.deb`` (from the archive's Packages index, ``apt-cache show
NAME=VERSION``), downloaded with ``apt-get download``, checked, and unpacked
with ``dpkg -x`` (the ``-dbg`` package: only its vmlinux) into
``<cache>/debian/<name>_<version>/``, renamed into place when complete.  The
``.deb`` is not kept.  Nothing is installed into the system.

QEMU's plugin API header comes from Debian's qemu source package, the
version of the installed qemu-system-x86 (``QEMU_SOURCE``).

When Debian's security suite drops a pinned version (it keeps only the
newest kernel), the fetch fails with one line saying how to move the pin.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import NamedTuple, Tuple

from ... import isa as isa_registry
from ...common import apt
from ...common.files import locked
from ...common.errors import UserError
from ...common.paths import CACHE

CACHE_DIR = CACHE / "debian"
CHUNK = 1 << 20


class Pin(NamedTuple):
    """One Debian binary package at one version."""

    name: str
    version: str
    sha256: str  # of the .deb, as the archive's Packages index lists it
    size: int  # bytes of the .deb
    members: Tuple[str, ...] = ()  # tar wildcards to keep (dpkg --fsys-tarfile); () = everything (dpkg -x)


class SourcePin(NamedTuple):
    """One file of a Debian source package at one version."""

    package: str
    version: str  # the source version (apt-get source PACKAGE=VERSION)
    tarball: str  # the file wanted from it
    sha256: str  # of that file, from the .dsc's Checksums-Sha256
    member: str  # the one path wanted from the tarball


GUEST_ISA = "amd64"  # the ISA of the pinned kernel packages below, and so of the guest and its module
RELEASE = f"6.1.0-57-cloud-{isa_registry.by_name(GUEST_ISA).oracle.debian_arch}"  # uname -r of the guest kernel
VERSION = "6.1.192-3"
IMAGE = Pin(f"linux-image-{RELEASE}", VERSION,
            "4fdd0172a8c3f41a97e92465b2ac1867e1c10d82d7aeed3d26ee7a5d14df1754", 26705532)
DEBUG = Pin(f"linux-image-{RELEASE}-dbg", VERSION,
            "07c7ca5e36079e60aa74e70a1100c52a099dbca8f803ed27b3bb1339c954cfb3", 283306844,
            (f"./usr/lib/debug/boot/vmlinux-{RELEASE}",))
HEADERS = Pin(f"linux-headers-{RELEASE}", VERSION,
              "c9d83dbb5a311c6abc9f908e1bb1d1623892262668ff445fe4efb6d4b104b296", 1592996)
HEADERS_COMMON = Pin("linux-headers-6.1.0-57-common", VERSION,
                     "5d248d9fff260d3750cf1a4223d9477c789e7fe6c8739f4b03f9b31431c2e5da", 10533452)
KBUILD = Pin("linux-kbuild-6.1", VERSION,
             "98a1baa42a21088e25bcc91c4d8e8134cf1e9d6e978b8c4584f6c7d05e6cc9d6", 1567812)
QEMU_SOURCE = SourcePin("qemu", "1:7.2+dfsg-7+deb12u18", "qemu_7.2+dfsg.orig.tar.xz",
                        "91aca71520040edc40b8d437aa3004dae614f58e286cf653ee8996c07af2962f",
                        "qemu-7.2.0/include/qemu/qemu-plugin.h")


def entry(pin: Pin) -> Path:
    """Where ``pin`` is unpacked in the cache (whether or not it is there yet)."""
    return CACHE_DIR / f"{pin.name}_{pin.version}"


def cached(pin: Pin) -> bool:
    return (entry(pin) / ".complete").is_file()


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(pin: Pin, *companions: Pin) -> Path:
    """``pin`` (and ``companions``, into the same root: the headers' relative links into kbuild's tree)
    unpacked in the cache, downloaded and checked on first use; the root directory."""
    final = entry(pin)
    if (final / ".complete").is_file():
        return final
    with locked(CACHE_DIR, pin.name):
        if (final / ".complete").is_file():
            return final
        work = Path(tempfile.mkdtemp(dir=CACHE_DIR, prefix=f".{pin.name}."))
        try:
            os.chmod(work, 0o755)  # mkdtemp's 0700 would make a shared cache private
            root = work / "root"
            root.mkdir()
            for p in (pin, *companions):
                deb = apt.download_binary(p.name, p.version, work)
                got = sha256_of(deb)
                if got != p.sha256:
                    raise UserError(f"{deb.name}: SHA256 {got}, but the pin in generator/run/ring0/packages.py "
                                    f"says {p.sha256}; the download is corrupt or the archive changed the package")
                _unpack(deb, root, p)
                deb.unlink()
            (root / ".complete").write_text("".join(f"{p.name} {p.version} {p.sha256}\n" for p in (pin, *companions)))
            if final.exists():
                shutil.rmtree(final)
            os.rename(root, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final


def _unpack(deb: Path, root: Path, pin: Pin) -> None:
    what = f"unpacking {deb.name}"
    if not pin.members:
        apt.run(["dpkg", "-x", str(deb), str(root)], root, what)
        return
    quoted = " ".join(shlex.quote(m) for m in pin.members)
    apt.run(["sh", "-c", f"dpkg --fsys-tarfile {shlex.quote(str(deb))} | tar -x --wildcards -C "
             f"{shlex.quote(str(root))} {quoted}"], root, what)


def fetch_source_member(pin: SourcePin) -> Path:
    """One file of a Debian source package (``pin.member`` of ``pin.tarball``), fetched once; its path."""
    final = CACHE_DIR / f"{pin.package}_{pin.version.replace(':', '_')}" / Path(pin.member).name
    if final.is_file():
        return final
    with locked(CACHE_DIR, f"src-{pin.package}"):
        if final.is_file():
            return final
        apt_dir = CACHE_DIR / "apt"
        apt_dir.mkdir(parents=True, exist_ok=True)
        opts = apt.private_options(pin.package, apt_dir)
        what = f"Debian source package {pin.package} {pin.version}"
        apt.run(["apt-get", *opts, "-qq", "update"], apt_dir, f"{what}: apt-get update")
        with tempfile.TemporaryDirectory(dir=CACHE_DIR, prefix=f".{pin.package}.") as tmp:
            try:
                apt.run(["apt-get", *opts, "-qq", "source", "--download-only", f"{pin.package}={pin.version}"],
                        Path(tmp), f"{what}: apt-get source")
            except UserError as e:
                raise UserError(f"{e}; if that version is gone, move QEMU_SOURCE in generator/run/ring0/packages.py "
                                "to the source of the installed qemu-system-x86 (dpkg -s qemu-system-x86)") from None
            tarball = Path(tmp) / pin.tarball
            if not tarball.is_file():
                raise UserError(f"{what}: apt-get source left no {pin.tarball}")
            got = sha256_of(tarball)
            if got != pin.sha256:
                raise UserError(f"{pin.tarball}: SHA256 {got}, but the pin says {pin.sha256}")
            with tarfile.open(tarball) as tar:
                try:
                    data = tar.extractfile(pin.member)
                except KeyError:
                    data = None
                if data is None:
                    raise UserError(f"{pin.tarball} has no {pin.member}")
                body = data.read()
            final.parent.mkdir(parents=True, exist_ok=True)
            tmpfile = final.with_name(f".{final.name}.{os.getpid()}")
            tmpfile.write_bytes(body)
            os.replace(tmpfile, final)
    return final
