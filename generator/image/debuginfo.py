"""Where an image's DWARF is: in the image itself or in a separate debug file.

Kernels and libraries usually ship stripped, their DWARF split into a debug
file that is found by one of a few conventions.  ``locate`` tries them in
gdb's order, first hit wins:

1. ``--debug FILE``, named by the user;
2. the image itself, when it has ``.debug_info``;
3. the build-id: ``<root>/.build-id/xx/yyyy.debug`` (Debian's ``-dbgsym`` and
   ``-dbg`` packages);
4. ``.gnu_debuglink``: its file name next to the image, in ``.debug/`` beside
   it, and under ``<root>`` plus the image's directory;
5. FreeBSD's convention, ``<root>`` plus the image's path plus ``.debug``
   (``/usr/lib/debug/boot/kernel/kernel.debug`` for ``/boot/kernel/kernel``).

``<root>`` is ``/usr/lib/debug`` unless the caller names others.  A debug
file must be the image's: when both carry a build-id they must be equal,
and when the image has a ``.gnu_debuglink`` the file's CRC32 must be the one
it records.  A mismatch is an error rather than a reason to keep looking,
because a stale debug file gives wrong lines silently.  Finding nothing is an
error that says every place looked at.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ..common.errors import UserError
from .elf import KernelImage
from . import open_image

DEFAULT_ROOTS: Tuple[str, ...] = ("/usr/lib/debug",)

# How a debug file was found, as the reports name it.
BY_OPTION = "--debug"
BY_IMAGE = "the image itself"
BY_BUILD_ID = "build-id"
BY_DEBUGLINK = ".gnu_debuglink"
BY_FREEBSD = "FreeBSD's /usr/lib/debug/<path>.debug"


@dataclass(frozen=True)
class DebugInfo:
    """The file holding an image's DWARF, and how it was found."""

    image: str  # the image the probes are named in
    path: str  # the file with .debug_info (the image itself, or its debug file)
    found_by: str  # one of the BY_* names
    build_id: Optional[str]  # the image's build-id


def debuglink(img: KernelImage) -> Optional[Tuple[str, int]]:
    """The ``.gnu_debuglink`` file name and CRC32, or None when the image has none.

    The section is the NUL-terminated name, padding to a multiple of four,
    and the CRC32 of the whole debug file in the image's byte order.
    """
    data = img.section_data(".gnu_debuglink")
    if not data:
        return None
    end = data.find(b"\0")
    if end <= 0:
        return None
    crc_at = (end + 4) & ~3
    if crc_at + 4 > len(data):
        return None
    name = data[:end].decode("utf-8", "surrogateescape")
    return name, struct.unpack_from("<I", data, crc_at)[0]


def file_crc32(path: str) -> int:
    """The CRC32 ``.gnu_debuglink`` records: zlib's, over the whole file."""
    crc = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            crc = zlib.crc32(chunk, crc)
    return crc


def build_id_path(root: str, build_id: str) -> str:
    """``<root>/.build-id/xx/yyyy.debug``: where a build-id names its debug file."""
    return os.path.join(root, ".build-id", build_id[:2], build_id[2:] + ".debug")


def _debuglink_candidates(image: str, name: str, roots: Sequence[str]) -> List[str]:
    directory = os.path.dirname(os.path.abspath(image))
    out = [os.path.join(directory, name), os.path.join(directory, ".debug", name)]
    out += [os.path.join(root, directory.lstrip("/"), name) for root in roots]
    return out


def _freebsd_candidates(image: str, roots: Sequence[str]) -> List[str]:
    path = os.path.abspath(image).lstrip("/")
    return [os.path.join(root, path + ".debug") for root in roots]


def _check(img: KernelImage, path: str, dbg: KernelImage, link: Optional[Tuple[str, int]], how: str) -> None:
    """A debug file that is not the image's is an error: the lines it gives would be wrong."""
    mine, theirs = img.build_id, dbg.build_id
    if mine and theirs and mine != theirs:
        raise UserError(
            f"{path}: build-id mismatch: the debug file ({how}) has build-id {theirs}, "
            f"{img.path} has {mine}; use the debug file built with this image"
        )
    if link is not None and not (mine and theirs):
        crc = file_crc32(path)
        if crc != link[1]:
            raise UserError(
                f"{path}: .gnu_debuglink CRC mismatch: {img.path} expects CRC32 {link[1]:08x}, "
                f"the file has {crc:08x}; it is not this image's debug file (rebuilt since?)"
            )


def _open_candidate(img: KernelImage, path: str, link: Optional[Tuple[str, int]], how: str) -> Optional[str]:
    """``path`` when it is this image's debug file with DWARF; None when it lacks DWARF."""
    dbg = open_image(path)
    _check(img, path, dbg, link, how)
    return path if dbg.has_section(".debug_info") else None


def locate(img: KernelImage, debug: Optional[str] = None, roots: Sequence[str] = DEFAULT_ROOTS) -> DebugInfo:
    """Find the DWARF of ``img`` (see the module docstring for the order); a one-line UserError when
    there is none, naming every place looked at, or when a debug file found is not the image's."""
    link = debuglink(img)
    if debug is not None:
        dbg = open_image(debug)
        _check(img, debug, dbg, link, BY_OPTION)
        if not dbg.has_section(".debug_info"):
            raise UserError(f"{debug}: no DWARF (.debug_info) in the file --debug names")
        return DebugInfo(img.path, debug, BY_OPTION, img.build_id)
    if img.has_section(".debug_info"):
        return DebugInfo(img.path, img.path, BY_IMAGE, img.build_id)
    looked = [f"{img.path} (no .debug_info)"]
    candidates: List[Tuple[str, str]] = []
    if img.build_id:
        candidates += [(build_id_path(root, img.build_id), BY_BUILD_ID) for root in roots]
    if link is not None:
        candidates += [(p, BY_DEBUGLINK) for p in _debuglink_candidates(img.path, link[0], roots)]
    candidates += [(p, BY_FREEBSD) for p in _freebsd_candidates(img.path, roots)]
    seen = set()
    for path, how in candidates:
        real = os.path.realpath(path)
        if real in seen or real == os.path.realpath(img.path):
            continue
        seen.add(real)
        if not os.path.isfile(path):
            looked.append(path)
            continue
        if _open_candidate(img, path, link, how):
            return DebugInfo(img.path, path, how, img.build_id)
        looked.append(f"{path} (no .debug_info)")
    raise UserError(
        f"{img.path}: no debug info; looked in {', '.join(looked)}; "
        "install the debug files or pass --debug FILE"
    )


def open_debug(img: KernelImage, info: DebugInfo) -> KernelImage:
    """The image holding the DWARF.  A stripped image also takes the debug file's ``.symtab``, so that
    probes in local functions are named as kinst names them (the kernel's own symbol table has them)."""
    if info.path == img.path:
        return img
    dbg = open_image(info.path)
    if not img.has_symtab() and dbg.has_symtab() and img.e_type != "ET_REL":
        img.adopt_symbols(dbg)
    return dbg

