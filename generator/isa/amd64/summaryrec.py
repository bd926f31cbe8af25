"""What an amd64 summary accelerator returns for one function, and how it numbers the kinds it counts.

Shared by ``native`` (the C walk) and ``fast`` (iced-x86), which return the
same records: the tests compare them with ``==``.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

from . import probe_md as M

# The counter of each kind, in TABLE_KINDS order from 1 (0 is unused).
KIND_CODES = {kind.kind: i + 1 for i, kind in enumerate(M.TABLE_KINDS)}


class Summary(NamedTuple):
    """What ``probes --summary`` prints for one function."""

    instructions: int
    kinds: Dict[str, int]  # probes with status ok, by kind, in kind-name order
    skipped: int  # instructions refused on their own account
    frame_rules: Tuple[str, ...]  # the prologue rules the function passes ('any', 'first')
    walk_error: str
