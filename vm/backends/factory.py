"""``make_backend(plan)``: the backend object for the monitor a plan names.

Kept apart from ``base`` because it must import both backends, and both
backends import ``base``.
"""

from __future__ import annotations

from ..plan import Plan
from .base import Backend
from .bhyve import BhyveBackend
from .qemu import QemuBackend


def make_backend(plan: Plan) -> Backend:
    if plan.backend == "bhyve":
        return BhyveBackend(plan)
    return QemuBackend(plan)
