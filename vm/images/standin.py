"""The stand-in guest: Debian's Linux kernel and a busybox initramfs, built from packages.

No FreeBSD image can be downloaded where this project is developed, so the
whole host side (overlay, meta disk, console, timeouts, panic detection,
teardown) is proved with a Linux guest whose ``/init``
(``vm/guest/standin-init``) follows the FreeBSD hook's contract.

Inputs, cached under ``.cache/vm/standin/`` (gitignored):

- the kernel: ``apt-get download`` of the package ``linux-image-amd64``
  depends on (``KINSTKIT_STANDIN_DEB`` names a .deb to use instead).  From
  it: ``boot/vmlinuz-*`` and the virtio modules (Debian builds virtio_pci and
  virtio_blk as modules), in dependency order read from their ``.modinfo``;
- the uncompressed ``vmlinux`` inside the bzImage, for QEMU's PVH entry
  (about 2 s to the marker under TCG, against about 5 s from the bzImage).
  Used only when it carries the Xen PVH ELF note; else the bzImage boots;
- ``busybox`` from busybox-static (it must be statically linked: the
  initramfs has no libc);
- the initramfs: a newc cpio written here (deterministic; ``cpio -t`` reads
  it back in the tests), gzip-compressed, named by the hash of its contents;
- ``system.raw``: a small read-only base "system disk", so that every run
  gets a per-run overlay exactly as a FreeBSD image does.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import lzma
import os
import shutil
import subprocess
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..config import CACHE, GUEST_DIR, VMError

STANDIN = CACHE / "standin"
META_PACKAGE = "linux-image-amd64"
DEB_ENV = "KINSTKIT_STANDIN_DEB"
INIT = GUEST_DIR / "standin-init"
# The drivers the guest needs for its disks; their dependencies come from .modinfo.
ROOT_MODULES = ("virtio_pci", "virtio_blk")
SYSTEM_DISK_SIZE = 4 * 1024 * 1024
SYSTEM_DISK_MAGIC = b"KINSTKIT STANDIN SYSTEM DISK v1\n"
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
# Kernel command line: serial console, our /init, and a panic or oops ends
# the VM at once (panic=-1 reboots immediately; QEMU's -no-reboot exits).
APPEND = "console=ttyS0 rdinit=/init panic=-1 oops=panic quiet"


@dataclass(frozen=True)
class StandinAssets:
    kernel: Path  # vmlinux (PVH) or the bzImage
    kernel_kind: str  # "vmlinux-pvh" or "bzImage"
    initramfs: Path
    system_disk: Path  # read-only base image
    package: str  # e.g. linux-image-6.1.0-57-amd64_6.1.192-3_amd64.deb
    append: str = APPEND


def _run(cmd: Sequence[str], cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, LC_ALL="C", DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True)


def _first_error(proc: subprocess.CompletedProcess) -> str:
    text = (proc.stderr or proc.stdout or "").strip().splitlines()
    errs = [line for line in text if line.startswith(("E:", "error", "dpkg"))] or text
    return errs[0] if errs else f"exit status {proc.returncode}"


# --- the kernel package ---------------------------------------------------------


def kernel_package_name() -> str:
    """The versioned package ``linux-image-amd64`` depends on."""
    if shutil.which("apt-cache") is None:
        raise VMError("the stand-in guest needs the linux-image package: apt-cache not found (not Debian?); "
                      f"set {DEB_ENV}=/path/to/linux-image-*.deb")
    name = _depends_on_image()
    if name is None and os.geteuid() == 0 and shutil.which("apt-get"):
        _run(["apt-get", "update", "-qq"])
        name = _depends_on_image()
    if name is None:
        raise VMError(f"the stand-in guest needs the linux-image package: apt-cache knows no dependency of "
                      f"{META_PACKAGE} (run apt-get update)")
    return name


def _depends_on_image() -> Optional[str]:
    proc = _run(["apt-cache", "depends", META_PACKAGE])
    for line in proc.stdout.splitlines():
        key, _, value = line.strip().lstrip("|").partition(": ")
        if key == "Depends" and value.startswith("linux-image-") and value.strip() != META_PACKAGE:
            return value.strip()
    return None


def kernel_deb(fetch: bool = True) -> Optional[Path]:
    """The kernel .deb: ``$KINSTKIT_STANDIN_DEB``, the cached one, or a fresh ``apt-get download``."""
    env = os.environ.get(DEB_ENV)
    if env:
        if not Path(env).is_file():
            raise VMError(f"{DEB_ENV}={env}: no such file")
        return Path(env)
    cached = sorted(STANDIN.glob("linux-image-*_amd64.deb"))
    if cached:
        return cached[-1]
    if not fetch:
        return None
    if shutil.which("apt-get") is None:
        raise VMError(f"the stand-in guest needs the linux-image package: apt-get not found; set {DEB_ENV}")
    package = kernel_package_name()
    STANDIN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=STANDIN, prefix=".download-") as tmp:
        proc = _run(["apt-get", "download", package], cwd=Path(tmp))
        debs = sorted(Path(tmp).glob(f"{package}_*.deb"))
        if proc.returncode != 0 or not debs:
            raise VMError(f"the stand-in guest needs the linux-image package: apt-get download {package}: "
                          f"{_first_error(proc)}")
        dest = STANDIN / debs[0].name
        os.replace(debs[0], dest)
    return dest


def extract_kernel(deb: Path, dest: Path) -> Tuple[Path, List[Path]]:
    """The bzImage and the virtio modules (dependency order) of a linux-image .deb."""
    if shutil.which("dpkg-deb") is None:
        raise VMError(f"dpkg-deb not found: cannot unpack {deb.name}")
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".extract-"))
    os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the cache is for everyone on the machine
    try:
        kos: Dict[str, bytes] = {}
        vmlinuz = None
        proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for m in tar:
                base = m.name.rsplit("/", 1)[-1]
                if m.isfile() and m.name.startswith("./boot/vmlinuz-"):
                    vmlinuz = base
                    (tmp / base).write_bytes(tar.extractfile(m).read())
                elif m.isfile() and "/kernel/drivers/" in m.name and base.startswith("virtio") and (
                    base.endswith((".ko", ".ko.xz"))
                ):
                    data = tar.extractfile(m).read()
                    if base.endswith(".xz"):
                        data, base = lzma.decompress(data), base[:-3]
                    kos[base[:-3]] = data
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.wait() != 0:
            raise VMError(f"dpkg-deb --fsys-tarfile {deb.name}: {err.strip() or 'failed'}")
        if vmlinuz is None:
            raise VMError(f"{deb.name}: no boot/vmlinuz-* in the package")
        order = module_order(kos, ROOT_MODULES)
        mdir = tmp / "modules"
        mdir.mkdir()
        for name in order:
            (mdir / f"{name}.ko").write_bytes(kos[name])
        (mdir / "load-order").write_text("".join(f"{n}.ko\n" for n in order))
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return dest / vmlinuz, [dest / "modules" / f"{n}.ko" for n in order]


def modinfo(ko: bytes) -> Dict[str, str]:
    """The key=value strings of a module's .modinfo section."""
    from elftools.elf.elffile import ELFFile

    sec = ELFFile(io.BytesIO(ko)).get_section_by_name(".modinfo")
    if sec is None:
        return {}
    out: Dict[str, str] = {}
    for item in sec.data().split(b"\0"):
        key, eq, value = item.decode(errors="replace").partition("=")
        if eq:
            out.setdefault(key, value)
    return out


def module_order(kos: Dict[str, bytes], roots: Iterable[str]) -> List[str]:
    """``roots`` and everything they depend on, dependencies first."""
    order: List[str] = []
    visiting = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name not in kos:
            raise VMError(f"the stand-in guest needs kernel module {name}, not in the linux-image package")
        if name in visiting:
            raise VMError(f"module dependency cycle at {name}")
        visiting.add(name)
        for dep in filter(None, modinfo(kos[name]).get("depends", "").split(",")):
            visit(dep)
        order.append(name)

    for r in roots:
        visit(r)
    return order


def extract_vmlinux(bzimage: Path) -> Optional[bytes]:
    """The uncompressed vmlinux inside a bzImage (xz or gzip payload), or None."""
    data = bzimage.read_bytes()
    for magic, unpack in (
        (b"\xfd7zXZ\x00", lambda b: lzma.LZMADecompressor().decompress(b)),
        (b"\x1f\x8b\x08", lambda b: zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(b)),
    ):
        at = data.find(magic)
        while at >= 0:
            try:
                out = unpack(data[at:])
            except (lzma.LZMAError, zlib.error):
                out = b""
            if out[:4] == b"\x7fELF":
                return out
            at = data.find(magic, at + 1)
    return None


def has_pvh_note(elf: bytes) -> bool:
    """True if the ELF has XEN_ELFNOTE_PHYS32_ENTRY (18): QEMU can enter it by PVH."""
    from elftools.elf.elffile import ELFFile

    f = ELFFile(io.BytesIO(elf))
    for seg in f.iter_segments():
        if seg["p_type"] == "PT_NOTE":
            for note in seg.iter_notes():
                if note["n_name"] == "Xen" and note["n_type"] == 18:
                    return True
    return False


# --- busybox and the initramfs --------------------------------------------------


def static_busybox() -> Path:
    for cand in BUSYBOX_CANDIDATES:
        p = Path(cand)
        if p.is_file():
            if _is_static(p):
                return p
            raise VMError(f"{p} is dynamically linked: the initramfs needs busybox-static (apt-get install busybox-static)")
    raise VMError("busybox not found: install busybox-static (./bootstrap does)")


def _is_static(path: Path) -> bool:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        return not any(seg["p_type"] == "PT_INTERP" for seg in ELFFile(f).iter_segments())


def newc(entries: Sequence[Tuple[str, int, bytes]]) -> bytes:
    """A cpio archive in the "newc" format the kernel unpacks: (path, mode, data) entries.

    Directories have mode S_IFDIR, files S_IFREG; every entry is owned by root
    with mtime 0, so the same inputs give the same bytes.
    """
    out = io.BytesIO()
    ino = 1
    for path, mode, data in list(entries) + [("TRAILER!!!", 0, b"")]:
        name = path.encode() + b"\0"
        nlink = 2 if mode & 0o040000 else 1
        fields = (ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name), 0)
        out.write(b"070701" + b"".join(b"%08X" % v for v in fields))
        out.write(name)
        out.write(b"\0" * (-(110 + len(name)) % 4))
        out.write(data)
        out.write(b"\0" * (-len(data) % 4))
        ino += 1
    return out.getvalue()


def initramfs_entries(busybox: Path, modules: Sequence[Path], init: Path = INIT) -> List[Tuple[str, int, bytes]]:
    d, x, f = 0o040755, 0o100755, 0o100644
    entries = [(p, d, b"") for p in ("bin", "dev", "proc", "sys", "tmp", "meta", "root", "lib", "lib/modules")]
    entries.append(("bin/busybox", x, busybox.read_bytes()))
    entries.append(("init", x, init.read_bytes()))
    for ko in modules:
        entries.append((f"lib/modules/{ko.name}", f, ko.read_bytes()))
    entries.append(("lib/modules/load-order", f, "".join(f"{ko.name}\n" for ko in modules).encode()))
    return entries


def build_initramfs(busybox: Path, modules: Sequence[Path], into: Path = STANDIN) -> Path:
    """The gzip'd newc initramfs, cached by the hash of its contents."""
    archive = newc(initramfs_entries(busybox, modules))
    digest = hashlib.sha256(archive).hexdigest()[:16]
    dest = into / f"initramfs-{digest}.cpio.gz"
    if not dest.exists():
        into.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        # mtime=0: the same archive gives the same file
        tmp.write_bytes(gzip.compress(archive, compresslevel=1, mtime=0))
        os.replace(tmp, dest)
    return dest


def system_disk(into: Path = STANDIN) -> Path:
    """The read-only base system disk: a magic header, then zeros."""
    dest = into / "system.raw"
    if not dest.exists():
        into.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(SYSTEM_DISK_MAGIC)
            f.truncate(SYSTEM_DISK_SIZE)
        os.chmod(tmp, 0o444)
        os.replace(tmp, dest)
    return dest


# --- putting it together ---------------------------------------------------------


def assets(fetch: bool = True) -> StandinAssets:
    """Everything the stand-in boots from, built on first use and cached.

    With ``fetch=False`` nothing is downloaded or built: a VMError names what
    is missing (dry runs, the KVM probe).
    """
    deb = kernel_deb(fetch=fetch)
    if deb is None:
        raise VMError("the stand-in guest's kernel is not cached yet (a real run downloads it)")
    kdir = STANDIN / deb.name[: -len(".deb")]
    done = kdir / ".complete"
    if not done.exists():
        if not fetch:
            raise VMError(f"the stand-in kernel {deb.name} is not unpacked yet")
        kdir.parent.mkdir(parents=True, exist_ok=True)
        bzimage, _ = extract_kernel(deb, kdir)
        vmlinux = extract_vmlinux(bzimage)
        if vmlinux is not None and has_pvh_note(vmlinux):
            (kdir / "vmlinux").write_bytes(vmlinux)
        done.write_text(bzimage.name + "\n")
    bzimage = kdir / done.read_text().strip()
    mods = [kdir / "modules" / line for line in (kdir / "modules" / "load-order").read_text().split()]
    vmlinux = kdir / "vmlinux"
    if fetch:
        initramfs = build_initramfs(static_busybox(), mods)
        disk = system_disk()
    else:
        cands = sorted(STANDIN.glob("initramfs-*.cpio.gz"), key=lambda p: p.stat().st_mtime)
        if not cands or not (STANDIN / "system.raw").exists():
            raise VMError("the stand-in initramfs is not built yet")
        initramfs, disk = cands[-1], STANDIN / "system.raw"
    if vmlinux.exists():
        return StandinAssets(vmlinux, "vmlinux-pvh", initramfs, disk, deb.name)
    return StandinAssets(bzimage, "bzImage", initramfs, disk, deb.name)


def read_newc(data: bytes) -> List[Tuple[str, int, bytes]]:
    """Parse a newc archive (the inverse of ``newc``; for tests and debugging)."""
    out, at = [], 0
    while True:
        if data[at : at + 6] != b"070701":
            raise ValueError(f"bad newc magic at {at}")
        fields = [int(data[at + 6 + 8 * i : at + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = data[at + 110 : at + 110 + namesize - 1].decode()
        at += 110 + namesize
        at += -at % 4
        body = data[at : at + size]
        at += size
        at += -at % 4
        if name == "TRAILER!!!":
            return out
        out.append((name, mode, body))

