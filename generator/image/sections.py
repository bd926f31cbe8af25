"""Sections as kinstkit places them: the ``Section`` record, and where an ET_REL file's are laid out.

An ET_REL file's sections have no addresses; ``KernelImage`` lays the
SHF_ALLOC ones out one after another from ``REL_BASE``, as FreeBSD's
``link_elf_obj.c`` does, so that addresses read from the bytes are the ones
the loaded module will have.
"""

from typing import NamedTuple


# Base address given to the first section of an ET_REL file.  Nonzero so that
# a zero displacement or a null pointer never looks like a valid address.
REL_BASE = 0x10000


class Section(NamedTuple):
    """One SHF_ALLOC section, with the address it has (or was given).

    A NamedTuple, as the other records here: ``dataclasses`` imports
    ``inspect``, which costs a small image's summary 8 ms."""

    name: str
    index: int
    addr: int  # sh_addr, or the synthetic address for ET_REL
    offset: int  # sh_offset in the file
    size: int  # sh_size
    executable: bool  # SHF_EXECINSTR
    nobits: bool  # SHT_NOBITS: no bytes in the file

    @property
    def label(self) -> str:
        """The name for messages; a section whose name is empty (a corrupt name offset) by its index."""
        return self.name or f"#{self.index} (no name)"
