"""The dtmalloc provider: the kernel's malloc(9) types, and the module that probes them.

- ``layouts``: ``struct malloc_type`` and ``struct sysinit`` per FreeBSD release, as data;
- ``mallocs``: discovery of every MALLOC_DEFINE in a kernel and its ``.ko`` files;
- ``report``: what ``malloc-types`` prints;
- ``generate``: the template context and rendering of ``templates/dtmalloc/``.

``PROVIDER`` is its record for the build stage and the command line
(``providers.contract.Provider``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from ..contract import Generated, Provider, ProviderOption, Selection

if TYPE_CHECKING:
    from ...image.elf import KernelImage


def _generate(img: "KernelImage", sel: Selection, out: Optional[Path]) -> Generated:
    import sys

    from . import generate

    d = generate.discover_for(img.path, sel.malloc_modules)
    for w in d.warnings:
        sys.stderr.write(f"warning: {w}\n")
    return Generated(tuple(generate.render(d, out)), "")


def _stamp(sel: Selection) -> Dict[str, object]:
    from ...common.files import sha256_file

    return {"extra": [sha256_file(Path(k)) for k in sel.malloc_modules], "extra_paths": list(sel.malloc_modules)}


def _fixed(*names: str):
    def files(*_target: str) -> Tuple[str, ...]:
        return names
    return files


PROVIDER = Provider(
    name="dtmalloc",
    plain=_fixed("dtmalloc.c", "dtmalloc_core.c", "dtmalloc_core.h"),
    portable=_fixed("dtmalloc_core.c", "dtmalloc_table.c"),
    includes=_fixed("."),
    table="dtmalloc_table.c",
    options=(
        ProviderOption("--module", "malloc_modules", "a .ko whose malloc types to include, in load order "
                       "(repeatable)", "append", build_flag="--malloc-module", metavar="M.ko"),
    ),
    generate=_generate,
    stamp=_stamp,
)
