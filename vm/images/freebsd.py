"""FreeBSD guests: official VM images (download, verify, cache) and the NoCloud seed.

``fetch_image("14.3-RELEASE")`` downloads
``<mirror>/releases/VM-IMAGES/14.3-RELEASE/amd64/Latest/FreeBSD-14.3-RELEASE-amd64-BASIC-CLOUDINIT-ufs.raw.xz``
and the directory's ``CHECKSUM.SHA256`` (``CHECKSUM.SHA512`` if that is
missing), checks the length the server announced and then the digest,
decompresses, and caches the raw image under
``.cache/vm/freebsd/<release>/``.  Nothing is kept unless it verified: a
download goes to a ``.part`` file that is renamed only afterwards.

``make_seed()`` writes the cloud-init NoCloud seed, an ISO 9660 volume
labelled ``cidata`` (xorriso, or genisoimage) with ``meta-data`` and
``user-data`` = ``vm/guest/freebsd/user-data``.  nuageinit(7) runs a
``#!`` user-data at the end of the first boot, so the image is never modified.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

from .._common import fetch

from ..config import CACHE, GUEST_DIR, RELEASE_RE, VMError

MIRROR = "https://download.freebsd.org"
MIRROR_ENV = "KINSTKIT_FREEBSD_MIRROR"
IMAGES = CACHE / "freebsd"
USER_DATA = GUEST_DIR / "freebsd" / "user-data"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Flavor:
    """One kind of official image."""

    directory: str  # under <mirror>/releases/
    filename: str  # {release} is substituted
    hook: str  # how the guest runs our hook: "nuageinit" (user-data) or "login" (console)


FLAVORS: Dict[str, Flavor] = {
    # release/tools/basic-cloudinit.conf: nuageinit runs a "#!" user-data at first boot (14.1+).
    "BASIC-CLOUDINIT": Flavor("VM-IMAGES", "FreeBSD-{release}-amd64-BASIC-CLOUDINIT-ufs.raw.xz", "nuageinit"),
    # release/tools/basic-ci.conf: no nuageinit; root logs in on the serial console without a password.
    "BASIC-CI": Flavor("CI-IMAGES", "FreeBSD-{release}-amd64-BASIC-CI.raw.xz", "login"),
}
CHECKSUM_FILES = (("CHECKSUM.SHA256", "sha256"), ("CHECKSUM.SHA512", "sha512"))


class DownloadError(VMError):
    """A download that failed or did not verify; nothing was cached."""


def image_url(release: str, flavor: str = "BASIC-CLOUDINIT", mirror: Optional[str] = None) -> Tuple[str, str]:
    """(image URL, URL of its directory) for an official amd64 image."""
    if not RELEASE_RE.match(release):
        raise VMError(f"release {release}: expected a name like 14.3-RELEASE")
    if flavor not in FLAVORS:
        raise VMError(f"flavor {flavor}: expected one of {', '.join(FLAVORS)}")
    f = FLAVORS[flavor]
    base = (mirror or os.environ.get(MIRROR_ENV) or MIRROR).rstrip("/")
    directory = f"{base}/releases/{f.directory}/{release}/amd64/Latest"
    return f"{directory}/{f.filename.format(release=release)}", directory


_BSD_LINE = re.compile(r"^(SHA256|SHA512) \((?P<name>[^)]+)\) = (?P<hex>[0-9a-fA-F]+)$")
_GNU_LINE = re.compile(r"^(?P<hex>[0-9a-fA-F]{64}|[0-9a-fA-F]{128}) [ *](?P<name>\S+)$")


def parse_checksums(text: str) -> Dict[str, str]:
    """File name -> hex digest, from BSD-style ``SHA256 (name) = hex`` or GNU ``hex  name`` lines."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        m = _BSD_LINE.match(line) or _GNU_LINE.match(line)
        if m:
            out[m.group("name")] = m.group("hex").lower()
    return out


def fetch_text(url: str, timeout: float = 60.0) -> str:
    try:
        return fetch.fetch_text(url, timeout)
    except fetch.FetchError as e:
        raise DownloadError(str(e)) from None


def download(url: str, dest: Path, algo: str, timeout: float = 60.0,
             progress: Optional[Callable[[int, Optional[int]], None]] = None) -> str:
    """Stream ``url`` to ``dest``; return its hex digest (see generator/common/fetch.py)."""
    try:
        return fetch.download(url, dest, algo, timeout, progress)
    except fetch.FetchError as e:
        raise DownloadError(str(e)) from None


def decompress_xz(src: Path, dest: Path) -> None:
    d = lzma.LZMADecompressor()
    with open(src, "rb") as inp, open(dest, "wb") as out:
        while True:
            chunk = inp.read(CHUNK)
            if not chunk:
                break
            try:
                out.write(d.decompress(chunk))
            except lzma.LZMAError as e:
                raise DownloadError(f"{src.name}: not a valid xz file ({e})")
    if not d.eof:
        raise DownloadError(f"{src.name}: the xz stream ends early (truncated image)")


def cached_image(release: str, flavor: str = "BASIC-CLOUDINIT", cache: Optional[Path] = None) -> Optional[Path]:
    url, _ = image_url(release, flavor, mirror=MIRROR)
    raw = (cache or IMAGES) / release / Path(url).name[: -len(".xz")]
    return raw if raw.exists() and raw.with_suffix(".verified.json").exists() else None


def fetch_image(release: str, flavor: str = "BASIC-CLOUDINIT", mirror: Optional[str] = None,
                cache: Optional[Path] = None, progress: Optional[Callable[[int, Optional[int]], None]] = None,
                timeout: float = 60.0) -> Path:
    """The verified raw image for ``release``, from the cache or the mirror."""
    url, directory = image_url(release, flavor, mirror)
    name = Path(url).name
    dest_dir = (cache or IMAGES) / release
    raw = dest_dir / name[: -len(".xz")]
    record = raw.with_suffix(".verified.json")
    if raw.exists() and record.exists():
        return raw
    sums, algo, sums_url = None, None, None
    last_error: Optional[DownloadError] = None
    for fname, alg in CHECKSUM_FILES:
        try:
            sums_url = f"{directory}/{fname}"
            sums, algo = parse_checksums(fetch_text(sums_url, timeout)), alg
            break
        except DownloadError as e:
            last_error = e
            if "HTTP 404" not in str(e):
                raise  # no network, a refused connection: the other file will not fare better
    if sums is None or algo is None:
        raise DownloadError(f"no checksum file for {release} {flavor}: {last_error}")
    if name not in sums:
        raise DownloadError(f"{sums_url} lists no checksum for {name}")
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest_dir, prefix=".download-") as tmp:
        part = Path(tmp) / (name + ".part")
        digest = download(url, part, algo, timeout, progress)
        if digest != sums[name]:
            raise DownloadError(f"{name}: bad checksum: {algo} {digest}, {sums_url} says {sums[name]}")
        unpacked = Path(tmp) / raw.name
        decompress_xz(part, unpacked)
        os.chmod(unpacked, 0o444)  # the base image is never written; runs get overlays
        os.replace(unpacked, raw)
    record.write_text(json.dumps({
        "url": url, "checksums": sums_url, "algorithm": algo, "digest": sums[name],
        "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "flavor": flavor,
    }, indent=1) + "\n")
    return raw


# --- the NoCloud seed --------------------------------------------------------------


def seed_files(run_id: str, user_data: Path = USER_DATA) -> Dict[str, bytes]:
    return {
        "meta-data": f"instance-id: kinstkit-{run_id}\nlocal-hostname: kinstkit\n".encode(),
        "user-data": user_data.read_bytes(),
    }


def seed_tool() -> Optional[str]:
    for tool in ("xorriso", "genisoimage", "mkisofs"):
        if shutil.which(tool):
            return tool
    return None


def seed_args(tool: str, out: Path, files_dir: Path) -> list:
    """An ISO 9660 (Joliet + Rock Ridge) volume labelled cidata, as NoCloud wants."""
    names = [str(files_dir / "user-data"), str(files_dir / "meta-data")]
    if tool == "xorriso":
        return ["xorriso", "-as", "mkisofs", "-quiet", "-V", "cidata", "-J", "-r", "-o", str(out)] + names
    return [tool, "-quiet", "-V", "cidata", "-J", "-r", "-o", str(out)] + names


def make_seed(out: Path, run_id: str, user_data: Path = USER_DATA) -> Path:
    tool = seed_tool()
    if tool is None:
        raise VMError("no ISO maker for the cloud-init seed: install xorriso (./bootstrap does) or genisoimage")
    with tempfile.TemporaryDirectory(prefix="kinstkit-seed-") as tmp:
        for name, data in seed_files(run_id, user_data).items():
            (Path(tmp) / name).write_bytes(data)
        proc = subprocess.run(seed_args(tool, out, Path(tmp)), capture_output=True, text=True)
        if proc.returncode != 0:
            raise VMError(f"{tool}: {proc.stderr.strip() or 'failed'}")
    return out


def image_format(path: Path) -> str:
    with open(path, "rb") as f:
        return "qcow2" if f.read(4) == b"QFI\xfb" else "raw"
