"""What kinstkit generates, per provider: template contexts and the files they render to.

- ``kinst``: the kinst provider module (portable core, table, FreeBSD glue) from a ``ProbePlan``;
- ``dtmalloc``: malloc-type discovery from a kernel and its modules, and the dtmalloc module;
- ``dscript``: ready-to-run D scripts, checked by ``dsyntax``;
- ``ciconfig``: CI recipes that build the modules for a list of FreeBSD releases.
"""

from __future__ import annotations


from typing import Tuple

from generator.common.defaults import PROVIDER_NAMES
from generator.common.errors import UserError


def parse_modules(text: str) -> Tuple[str, ...]:
    """``--modules kinst,dtmalloc``: the names, each one a provider kinstkit generates."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise UserError("--modules: name at least one of " + ", ".join(PROVIDER_NAMES))
    for n in names:
        if n not in PROVIDER_NAMES:
            raise UserError(f"--modules: unknown module '{n}'; kinstkit builds {', '.join(PROVIDER_NAMES)}")
    return names
