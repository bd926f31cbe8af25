"""The guest kernel's files, from the pinned packages: what boots, what the table is made from, what builds.

``assets()`` fetches (once) and names them in one ``KernelAssets`` record;
the later stages take that record, never a path they work out themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...common.errors import UserError
from . import packages as P


@dataclass(frozen=True)
class KernelAssets:
    """The files of the pinned guest kernel, in the cache."""

    release: str  # uname -r
    image_root: Path  # linux-image unpacked: boot/vmlinuz-*, lib/modules/<release>/
    vmlinux: Path  # the -dbg package's vmlinux: symbols, DWARF, the kernel's data tables
    headers: Path  # linux-headers-<release>: .config, Module.symvers, generated headers (kbuild's objtree)
    headers_common: Path  # linux-headers-<ver>-common: the source tree headers (kbuild's srctree); kbuild's
    # scripts and tools are unpacked beside them, where the headers' relative links point

    @property
    def bzimage(self) -> Path:
        return self.image_root / "boot" / f"vmlinuz-{self.release}"

    @property
    def modules_dir(self) -> Path:
        return self.image_root / "lib" / "modules" / self.release


def assets() -> KernelAssets:
    """Every pinned package fetched and unpacked; their paths."""
    image = P.fetch(P.IMAGE)
    debug = P.fetch(P.DEBUG)
    headers = P.fetch(P.HEADERS, P.HEADERS_COMMON, P.KBUILD)
    a = KernelAssets(
        release=P.RELEASE,
        image_root=image,
        vmlinux=debug / "usr" / "lib" / "debug" / "boot" / f"vmlinux-{P.RELEASE}",
        headers=headers / "usr" / "src" / f"linux-headers-{P.RELEASE}",
        headers_common=headers / "usr" / "src" / "linux-headers-6.1.0-57-common",
    )
    for path in (a.bzimage, a.vmlinux, a.headers / ".config", a.headers_common / "Makefile"):
        if not path.exists():
            raise UserError(f"{path}: missing from its unpacked package; remove {path.parent} from the cache "
                            "and run again")
    return a
