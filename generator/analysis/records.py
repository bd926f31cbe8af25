"""Records the analysis stage makes from stage 2's verdicts.

``Function`` (stage 1) lives in ``generator/image/elf.py`` and ``Insn`` and
``Verdict`` (stage 2) in ``generator/isa/contract.py``.  The analysis makes
one ``Probe`` per instruction and wraps a function's in a ``FunctionReport``.
``Probe`` is a NamedTuple rather than a dataclass because a kernel has
millions of instructions and NamedTuple construction is several times
cheaper; both are immutable.

``md`` is the ISA's probe-metadata record (``struct kinst_probe_md``): it holds
exactly what FreeBSD's kinst would store for the instruction, except where
docs/refusals.md lists a deliberate correction.
"""

from typing import Any, NamedTuple, Optional

from ..isa.contract import KIND_SKIP, STATUS_OK, STATUS_SKIP

__all__ = ["KIND_SKIP", "STATUS_OK", "STATUS_SKIP", "FunctionReport", "Probe"]


class Probe(NamedTuple):
    """One instruction of a function and what kinst does with it."""

    offset: int  # from the function symbol; the probe name
    address: int  # patch point
    length: int  # instruction length
    bytes: bytes  # original bytes
    mnemonic: str  # as capstone prints it (AT&T on amd64)
    operands: str
    status: str  # "ok" or "skip"
    reason: str  # why it is skipped ("" when ok)
    kind: str  # how a hit resumes: one of the ISA's table kinds, or "skip"
    md: Any  # the ISA's probe metadata
    target: Optional[int]  # direct branch/call target, when known
    target_symbol: Optional[str]  # symbolic target from a relocation (ET_REL)


class FunctionReport(NamedTuple):
    """The verdict for one function and its probes."""

    name: str
    qualified: str  # name@file for locals
    address: int
    size: int
    eligible: bool
    reason: str  # why the whole function is refused ("" when eligible)
    probes: tuple[Probe, ...]
    walk_error: str  # decode walk that did not end at the symbol's end
