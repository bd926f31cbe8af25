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

from typing import Optional


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
