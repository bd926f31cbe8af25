"""Stage 1: the kernel image.

- ``elf``: ``KernelImage``, kinstkit's one ELF reader: sections, symbols and
  functions, relocations (applied for ET_REL), segments, build-id; every
  malformed file is one ``UserError`` line.  It reads through one module per
  concept: ``headers`` (ELF, program and section headers), ``sections``,
  ``relocations``, ``symbols``.
- ``debuginfo``: where an image's DWARF is (the image or its checked debug file).
- ``sample``: the embedded default image, a kernel-style sample built from
  ``samples/kernel/``.

Records handed on: ``Function``, ``Section``, ``Reloc``, ``Segment``.
"""

import os
import weakref
from typing import TYPE_CHECKING, Optional, Tuple

if TYPE_CHECKING:
    from .elf import KernelImage

# The images open now, by file identity: what open_image hands out while a
# caller still holds it.  Weak, so a long process (the test suite, a bench)
# keeps no image nobody uses, and a deleted temporary file is let go.
_OPEN: "weakref.WeakValueDictionary[Tuple[object, ...], KernelImage]" = weakref.WeakValueDictionary()


def resolve_kernel(path: Optional[str]) -> str:
    """The image to read: ``path``, or the embedded sample kernel when none is named.

    Here rather than in ``sample``: that module (hashlib, subprocess, the
    toolchain probing) is imported only when the sample is wanted, not on
    every command given a ``--kernel``.
    """
    if path:
        return path
    from .sample import sample_kernel

    return str(sample_kernel())


def open_image(path: str, *, any_machine: bool = False) -> "KernelImage":
    """The image at ``path``, read and validated once while anyone holds it.

    Every stage that is handed a path (a kernel, a --module, a built .ko, a
    debug file) asks here, so one run parses each file once: generate,
    build and check-ko share the kernel object instead of each reopening
    it.  The key is the file's identity (device, inode, size, mtime), not
    only its name, so a .ko rebuilt at the same path is a new image.  Bad
    input is ``KernelImage.open``'s one-line UserError.
    """
    from .elf import KernelImage

    try:
        st = os.stat(path)
        key: Optional[Tuple[object, ...]] = (path, any_machine, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        key = None  # KernelImage.open reports the problem in one line
    img = _OPEN.get(key) if key else None
    if img is None:
        img = KernelImage.open(path, any_machine=any_machine)
        if key:
            _OPEN[key] = img
    return img


def open_kernel(path: Optional[str]) -> "KernelImage":
    """The image a command reads: ``--kernel PATH``, or the embedded sample."""
    return open_image(resolve_kernel(path))
