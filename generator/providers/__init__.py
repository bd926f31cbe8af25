"""Stage 4: what kinstkit generates, one package per provider, each exporting a ``Provider`` record.

- ``kinst``: the kinst provider module (portable core, table, FreeBSD glue) from a ``ProbePlan``;
- ``dtmalloc``: malloc-type discovery from a kernel and its modules, and the dtmalloc module;
- ``contract``: the ``Provider`` record and the ``Selection`` of what the user asked for.

``PROVIDERS`` is the registry, in build and load order: adding a provider
is one package here, its ``templates/<name>/`` and ``sys/modules/<name>/``,
and one line below.
"""

from __future__ import annotations

from typing import Dict, Tuple

from ..common.errors import UserError
from . import dtmalloc, kinst
from .contract import Provider

PROVIDERS: Dict[str, Provider] = {p.name: p for p in (
    kinst.PROVIDER,
    dtmalloc.PROVIDER,
)}
PROVIDER_NAMES: Tuple[str, ...] = tuple(PROVIDERS)


def by_name(name: str) -> Provider:
    """The provider called ``name``; UserError naming those kinstkit has."""
    if name not in PROVIDERS:
        raise UserError(f"unknown module '{name}'; kinstkit builds {', '.join(PROVIDER_NAMES)}")
    return PROVIDERS[name]


def parse_modules(text: str) -> Tuple[str, ...]:
    """``--modules kinst,dtmalloc``: the names, each one a provider kinstkit generates."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise UserError("--modules: name at least one of " + ", ".join(PROVIDER_NAMES))
    for n in names:
        if n not in PROVIDERS:
            raise UserError(f"--modules: unknown module '{n}'; kinstkit builds {', '.join(PROVIDER_NAMES)}")
    return names
