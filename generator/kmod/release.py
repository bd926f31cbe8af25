"""``invoke fetch-release``: a FreeBSD release's sources and kernel, verified, in a local cache.

Cross-building a module needs the ``sys/`` tree and the kernel of the exact
release it will run on.  The FreeBSD mirrors publish both as distribution
sets next to a ``MANIFEST`` that lists each set's SHA256::

    https://download.freebsd.org/releases/amd64/14.3-RELEASE/MANIFEST
    .../src.txz  .../kernel.txz  .../kernel-dbg.txz

``fetch_release`` downloads the MANIFEST and the sets into a temporary
directory inside the cache, checks every byte count and SHA256, unpacks them
there and only then renames the result into place, so the cache holds a
complete, verified release or nothing: an interrupted or failed fetch leaves
no half-unpacked tree behind.  Of ``src.txz`` only ``usr/src/sys`` and
``usr/src/share/mk`` are unpacked (the module build needs nothing else, and
the rest is most of the set's size).

The mirror is ``--mirror`` or ``$KINSTKIT_FREEBSD_MIRROR`` (default
``https://download.freebsd.org``; the path ``/releases/amd64/<release>/`` is
appended, and the VM runner reads the same variable), which the tests point
at a loopback HTTP server; the cache is ``$KINSTKIT_CACHE``, ``--cache``, or
``$XDG_CACHE_HOME/kinstkit`` (``~/.cache/kinstkit``).
"""

from __future__ import annotations

import json
import lzma
import os
import re
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .. import isa as isa_registry
from ..common import fetch
from ..common.errors import UserError
from ..common.paths import CACHE
from ..isa.contract import Isa

DEFAULT_MIRROR = "https://download.freebsd.org"  # same variable and meaning as vm/images/freebsd.py's
ENV_MIRROR = "KINSTKIT_FREEBSD_MIRROR"
DISTS = ("src.txz", "kernel.txz", "kernel-dbg.txz")
# What to unpack of each set: path prefixes (None: everything).
UNPACK: Dict[str, Optional[Sequence[str]]] = {
    "src.txz": ("usr/src/sys/", "usr/src/share/mk/"),
    "kernel.txz": None,
    "kernel-dbg.txz": None,
}
STAMP = "kinstkit-release.json"
TIMEOUT = 60  # seconds without data before a download is abandoned
_RELEASE = re.compile(r"^\d+\.\d+-(RELEASE|BETA\d+|RC\d+|ALPHA\d+)(-p\d+)?$")


@dataclass(frozen=True)
class Release:
    """Where a fetched release lives in the cache."""

    name: str
    root: Path

    @property
    def sysdir(self) -> Path:
        return self.root / "usr" / "src" / "sys"

    @property
    def kernel(self) -> Path:
        return self.root / "boot" / "kernel" / "kernel"

    @property
    def kernel_debug(self) -> Path:
        return self.root / "usr" / "lib" / "debug" / "boot" / "kernel" / "kernel.debug"

    @property
    def module_dir(self) -> Path:
        return self.root / "boot" / "kernel"

    def complete(self) -> bool:
        return (self.root / STAMP).is_file()


def cache_root(explicit: Optional[str] = None) -> Path:
    return Path(explicit) if explicit else CACHE


def release_dir(name: str, cache: Optional[str] = None, target: Optional[str] = None) -> Release:
    """Where release ``name`` for ``target`` (an ISA name; None: this machine's) is cached."""
    check_name(name)
    return Release(name, cache_root(cache) / "releases" / _isa(target).name / name)


def _isa(target: Optional[str]) -> Isa:
    return isa_registry.by_name(target) if target else isa_registry.host()


def check_name(name: str) -> None:
    if not _RELEASE.match(name):
        raise UserError(f"--release {name!r}: expected a FreeBSD release name such as 14.3-RELEASE")


def fetched(name: str, cache: Optional[str] = None, target: Optional[str] = None) -> Release:
    """A release that ``fetch-release`` completed, or a UserError saying how to get it."""
    rel = release_dir(name, cache, target)
    if not rel.complete():
        again = f" --target {target}" if target else ""
        raise UserError(f"{name} is not in the cache ({rel.root}): run `invoke fetch-release --release {name}{again}` "
                        "first")
    return rel


def parse_manifest(text: str, url: str) -> Dict[str, str]:
    """``MANIFEST``: one set per line, tab-separated: file name, sha256, file count, name, description, default."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or not re.fullmatch(r"[0-9a-f]{64}", fields[1]):
            raise UserError(f"{url}: line {n} is not a MANIFEST entry (file<TAB>sha256<TAB>...)")
        out[fields[0]] = fields[1]
    return out


def _url(mirror: str, release: str, name: str, isa: Isa) -> str:
    """The mirror's path of a release's file: releases/<MACHINE>[/<MACHINE_ARCH>]/<release>/<file>."""
    k = isa.kmod
    machine = k.machine if k.machine == k.machine_arch else f"{k.machine}/{k.machine_arch}"
    return f"{mirror.rstrip('/')}/releases/{machine}/{release}/{name}"


def download(url: str, dest: Path, progress=None) -> str:
    """Stream ``url`` into ``dest``; returns its sha256 (see generator/fetch.py)."""
    return fetch.download(url, dest, "sha256", TIMEOUT, progress)


def _safe_members(tar: tarfile.TarFile, prefixes: Optional[Sequence[str]], url: str) -> List[tarfile.TarInfo]:
    out = []
    for m in tar.getmembers():
        name = m.name[2:] if m.name.startswith("./") else m.name
        if name.startswith("/") or ".." in Path(name).parts:
            raise UserError(f"{url}: member {m.name!r} would unpack outside the cache; refusing the archive")
        if m.islnk() and (m.linkname.startswith("/") or ".." in Path(m.linkname).parts):
            raise UserError(f"{url}: hard link {m.name!r} points outside the archive; refusing it")
        if m.issym():
            target = os.path.normpath(os.path.join(os.path.dirname(name), m.linkname))
            if m.linkname.startswith("/") or target.startswith(".."):
                continue  # a link out of the tree: nothing the build reads, and not ours to create
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            continue  # device nodes and fifos: nothing the build needs
        if prefixes is not None and not any((name + "/").startswith(p) or name.startswith(p) for p in prefixes):
            continue
        out.append(m)
    return out


def unpack(archive: Path, dest: Path, prefixes: Optional[Sequence[str]], url: str) -> int:
    """Unpack an xz tarball (only members under ``prefixes``); returns the number of members."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = _safe_members(tar, prefixes, url)
            kwargs = {"filter": "tar"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(dest, members=members, **kwargs)
            return len(members)
    except (tarfile.TarError, EOFError, lzma.LZMAError) as e:
        raise UserError(f"{url}: not a readable tar archive ({e})") from None
    except OSError as e:
        raise UserError(f"{dest}: cannot unpack {archive.name}: {e.strerror or e}") from None


def fetch_release(name: str, mirror: Optional[str] = None, cache: Optional[str] = None,
                  dists: Sequence[str] = DISTS, force: bool = False, out=sys.stdout,
                  target: Optional[str] = None) -> Release:
    """Download, verify and unpack ``dists`` of release ``name`` for ``target`` into the cache (all or nothing)."""
    rel = release_dir(name, cache, target)
    isa = _isa(target)
    mirror = mirror or os.environ.get(ENV_MIRROR) or DEFAULT_MIRROR
    for d in dists:
        if d not in DISTS:
            raise UserError(f"--dists: unknown set {d!r}; choose from {', '.join(DISTS)}")
    if rel.complete() and not force:
        have = json.loads((rel.root / STAMP).read_text()).get("dists", {})
        if all(d in have for d in dists):
            out.write(f"{name}: already fetched and verified in {rel.root}\n")
            return rel
    parent = rel.root.parent
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.fetch.", dir=parent))
    try:
        manifest_url = _url(mirror, name, "MANIFEST", isa)
        mpath = work / "MANIFEST"
        download(manifest_url, mpath)
        sums = parse_manifest(mpath.read_text(errors="replace"), manifest_url)
        root = work / "root"
        root.mkdir()
        record = {}
        for d in dists:
            url = _url(mirror, name, d, isa)
            if d not in sums:
                raise UserError(f"{manifest_url}: lists no {d}; this release does not publish it")
            path = work / d
            show = _progress(d, out) if out.isatty() else None
            digest = download(url, path, show)
            if show:
                out.write("\n")
            if digest != sums[d]:
                raise UserError(f"{url}: SHA256 {digest} does not match the MANIFEST's {sums[d]}; "
                                "not unpacked (a bad mirror or a corrupted download)")
            count = unpack(path, root, UNPACK[d], url)
            path.unlink()
            record[d] = {"url": url, "sha256": digest, "members": count}
            out.write(f"{name}: {d} verified (sha256 {digest[:16]}...), {count} entries unpacked\n")
        (root / STAMP).write_text(json.dumps({"release": name, "mirror": mirror, "dists": record}, indent=2) + "\n")
        old = None
        if rel.root.exists():
            old = parent / f".{name}.old.{os.getpid()}"
            os.rename(rel.root, old)
        os.rename(root, rel.root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out.write(f"{name}: sys/ tree {rel.sysdir}\n")
    if "kernel.txz" in dists:
        out.write(f"{name}: kernel {rel.kernel}\n")
    out.write(f"next: invoke build --release {name}\n")
    return rel


def _progress(label: str, out):
    def show(got: int, total: Optional[int]) -> None:
        if total:
            out.write(f"\r{label}: {got >> 20} of {total >> 20} MiB")
        else:
            out.write(f"\r{label}: {got >> 20} MiB")
        out.flush()

    return show
