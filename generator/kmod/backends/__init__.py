"""Stage 5's build backends, one module each, each exporting a ``Backend`` record.

- ``native``: ``make`` with ``bsd.kmod.mk``, on a FreeBSD host;
- ``cross``: clang and ld.lld doing what ``bsd.kmod.mk`` would, anywhere;
- ``contract``: the ``Backend`` record and the ``Job`` it is handed.

``BACKENDS`` is the registry, the host's default first: adding a backend is
one module here and one line below.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ...common.errors import UserError
from . import cross, native
from .contract import Backend, Job

BACKENDS: Dict[str, Backend] = {b.name: b for b in (
    native.BACKEND,
    cross.BACKEND,
)}
BACKEND_NAMES: Tuple[str, ...] = tuple(BACKENDS)

__all__ = ["BACKENDS", "BACKEND_NAMES", "Backend", "Job", "choose"]


def choose(name: Optional[str]) -> Backend:
    """The backend called ``name`` (None or "": this host's default); UserError when it cannot run here."""
    if not name:
        return next(b for b in BACKENDS.values() if b.default_here())
    if name not in BACKENDS:
        raise UserError(f"--backend {name}: unknown; kinstkit builds with {', '.join(BACKEND_NAMES)}")
    backend = BACKENDS[name]
    why = backend.unusable()
    if why:
        raise UserError(f"--backend {name}: {why}")
    return backend
