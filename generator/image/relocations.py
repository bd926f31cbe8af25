"""Relocations: the ``Reloc`` record of one that lands in an allocated section, and SHT_REL's addends.

Which types exist and how they are applied is the ISA's (``Isa.reloc_type``,
``Isa.reloc_insert``); ``KernelImage`` applies those whose symbols the file
defines and keeps the rest as unresolved records.
"""

from typing import NamedTuple, Sequence


class Reloc(NamedTuple):
    """A relocation that lands in an allocated section (ET_REL only).

    A NamedTuple: a large module has hundreds of thousands."""

    address: int  # where the field is (synthetic address)
    type: str  # R_X86_64_*
    symbol: str  # symbol name ("" for a section symbol without a name)
    addend: int
    resolved: bool  # True when applied: a type we apply, against a symbol defined here
    width: int = 4  # bytes of the field it fills (0: a type kinstkit does not know)


def _implicit_addend(raw: Sequence[int], off: int, width: int) -> int:
    """SHT_REL: the addend is the field's (signed) value before relocation."""
    if off + width > len(raw):
        return 0
    return int.from_bytes(bytes(raw[off : off + width]), "little", signed=True)
