"""Stage 1: the kernel image.

- ``elf``: ``KernelImage``, kinstkit's one ELF reader: sections, symbols and
  functions, relocations (applied for ET_REL), segments, build-id; every
  malformed file is one ``UserError`` line.
- ``sample``: the embedded default image, a kernel-style sample built from
  ``samples/kernel/``.

Records handed on: ``Function``, ``Section``, ``Reloc``, ``Segment``.
"""
