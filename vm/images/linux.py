"""The Linux guest (``vm-test --guest linux``): a Debian kernel package the caller unpacked, booted by PVH.

The caller (``generator/run/ring0``) hands over an unpacked ``linux-image``
package (``VMConfig.image_package``).  From it, cached under
``<cache>/vm/linux/<release>/``:

- the vmlinux inside the bzImage, for QEMU's PVH entry: Debian's 6.1 cloud
  kernel compresses it with LZ4 (legacy frames, magic ``02 21 4c 18``),
  which ``lz4 -dc`` unpacks; xz and gzip payloads are read as the stand-in's;
- the virtio modules the meta disk needs, in the order their ``.modinfo``
  gives, in an initramfs with static busybox and the stand-in's ``/init``
  (``vm/guest/standin-init``: the same hook contract).

The system disk is the stand-in's small base image, with a per-run overlay.
"""

from __future__ import annotations

import lzma
import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

from ..config import CACHE, VMError
from . import standin

LINUX = CACHE / "linux"
LZ4_LEGACY = b"\x02\x21\x4c\x18"
# Kernel command line: serial console, our /init, a panic or an oops ends the VM at once (QEMU runs with
# -no-reboot); fixed addresses (nokaslr), so that the host's table and QEMU plugin name the live ones;
# loglevel 5 puts warnings (WARN()) on the console, not the boot's chatter; spectre_v2=off has the kernel
# patch its retpoline calls (call __x86_indirect_thunk_<reg>) into plain indirect calls (call *%<reg>) at
# boot, so that the live text holds the call-through-a-register kind FreeBSD's kernels are full of.
APPEND = "console=ttyS0 rdinit=/init panic=-1 oops=panic nokaslr loglevel=5 spectre_v2=off"


def _lz4_payload(bzimage: Path) -> bytes:
    """The vmlinux in an LZ4-compressed bzImage, or b"" when there is none."""
    data = bzimage.read_bytes()
    at = data.find(LZ4_LEGACY)
    if at < 0:
        return b""
    if shutil.which("lz4") is None:
        raise VMError(f"{bzimage.name} is LZ4-compressed: install lz4 (./bootstrap does)")
    proc = subprocess.run(["lz4", "-dc"], input=data[at:], capture_output=True)
    out = proc.stdout
    return out if out[:4] == b"\x7fELF" else b""


def vmlinux_of(bzimage: Path) -> bytes:
    """The uncompressed vmlinux of a bzImage (LZ4, xz or gzip payload); a VMError when there is none."""
    elf = _lz4_payload(bzimage) or standin.extract_vmlinux(bzimage)
    if not elf:
        raise VMError(f"{bzimage}: no LZ4, xz or gzip payload holding an ELF vmlinux")
    if not standin.has_pvh_note(elf):
        raise VMError(f"{bzimage}: its vmlinux has no PVH entry note (CONFIG_PVH): QEMU cannot boot it directly")
    return elf


def virtio_modules(root: Path, release: str) -> Dict[str, bytes]:
    """The virtio drivers of an unpacked linux-image package, by module name."""
    kos: Dict[str, bytes] = {}
    base = root / "lib" / "modules" / release / "kernel" / "drivers"
    for p in sorted(base.rglob("virtio*.ko*")):
        data = p.read_bytes()
        name = p.name
        if name.endswith(".xz"):
            data, name = lzma.decompress(data), name[:-3]
        if name.endswith(".ko"):
            kos[name[:-3]] = data
    return kos


def assets(root: Path, build: bool = True) -> standin.StandinAssets:
    """What the guest boots from, made on first use: the PVH vmlinux, the initramfs, the system disk.

    With ``build=False`` (a dry run) nothing is made: the paths a real run would use."""
    vmlinuz = sorted((root / "boot").glob("vmlinuz-*"))
    if not vmlinuz:
        raise VMError(f"{root}: no boot/vmlinuz-* (not an unpacked linux-image package)")
    release = vmlinuz[0].name[len("vmlinuz-"):]
    dest = LINUX / release
    vmlinux = dest / "vmlinux"
    mods = dest / "modules"
    if not build:
        return standin.StandinAssets(vmlinux, "vmlinux-pvh", LINUX / "initramfs-<hash>.cpio.gz",
                                     standin.STANDIN / "system.raw", vmlinuz[0].name, APPEND)
    if not (dest / ".complete").is_file():
        kos = virtio_modules(root, release)
        order = standin.module_order(kos, standin.ROOT_MODULES)
        tmp = LINUX / f".{release}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "modules").mkdir(parents=True)
        (tmp / "vmlinux").write_bytes(vmlinux_of(vmlinuz[0]))
        for name in order:
            (tmp / "modules" / f"{name}.ko").write_bytes(kos[name])
        (tmp / "modules" / "load-order").write_text("".join(f"{n}.ko\n" for n in order))
        (tmp / ".complete").write_text(vmlinuz[0].name + "\n")
        if dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        try:
            os.rename(tmp, dest)
        except OSError:  # another run made it meanwhile: as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
            if not (dest / ".complete").is_file():
                raise
    order: List[Path] = [mods / line for line in (mods / "load-order").read_text().split()]
    initramfs = standin.build_initramfs(standin.static_busybox(), order, into=LINUX)
    return standin.StandinAssets(vmlinux, "vmlinux-pvh", initramfs, standin.system_disk(), vmlinuz[0].name, APPEND)
