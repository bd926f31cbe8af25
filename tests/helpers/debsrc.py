"""Images with DWARF for the source-line and inline tests: built from a Debian source package, or the machine's.

``debian_image`` builds Lua 5.4 from its Debian source package with kernel
flags and ``-g`` (``generator.bench.debsrc``: fetched with ``apt-get source``
into ``<cache>/debsrc/``, cached builds), and skips, naming the package and
what failed, when it cannot be fetched or built.  ``machine_library_with_debug_file``
is libm with its separate debug file from libc6-dbg, found by build-id.
"""

from __future__ import annotations

from pathlib import Path

from helpers.skips import missing, require_system_library

MACHINE_LIBRARY = "libm.so.6"


def debian_image(variant: str) -> Path:
    """The Lua 5.4 image built with ``variant``'s compiler; skip when it cannot be had."""
    __tracebackhide__ = True
    from generator.bench.debsrc import DEFAULT_PROJECT, debian_image as build
    from generator.common.errors import UserError

    try:
        return build(DEFAULT_PROJECT, variant)
    except UserError as e:
        missing(f"Debian source package {DEFAULT_PROJECT} not fetched or built ({variant}): {e}")


def machine_library_with_debug_file() -> Path:
    """libm, whose DWARF is only in its separate debug file; skip when libc6-dbg does not provide it."""
    __tracebackhide__ = True
    from generator.common.errors import UserError
    from generator.image.debuginfo import BY_BUILD_ID, locate
    from generator.image.elf import KernelImage

    lib = require_system_library(MACHINE_LIBRARY)
    try:
        info = locate(KernelImage.open(str(lib)))
    except UserError as e:
        missing(f"{MACHINE_LIBRARY} has no debug file (apt-get install libc6-dbg, the same version as libc6): {e}")
    if info.found_by != BY_BUILD_ID:
        missing(f"{MACHINE_LIBRARY}: its DWARF was found {info.found_by}, not as a separate file by build-id")
    return lib
