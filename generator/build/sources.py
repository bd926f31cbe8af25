"""The modules kinstkit builds, and their sources in ``sys/modules/<m>/`` (stage 5, step 1).

Each provider is generated C (``providers.kinst``, ``providers.dtmalloc``) plus a
hand-written ``bsd.kmod.mk`` Makefile.  ``generate_module`` renders the
sources unless a stamp says the same kernel, options and kinstkit code made
them already, so an unchanged build does not touch them and nothing
downstream rebuilds; ``stage_makefile`` puts the Makefile beside sources
generated elsewhere (``--src``); ``table_names_kernel`` is the first
offline check, that the table was made for this kernel.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from generator.common.errors import UserError
from generator.build.manifest import generator_fingerprint, input_record, inputs_current, read_manifest, sha256_file, stamp_key
from generator.common.files import write_json
from generator.common.paths import SYS_MODULES

MAKEFILES = SYS_MODULES  # the hand-written bsd.kmod.mk Makefiles


@dataclass(frozen=True)
class Provider:
    """A module kinstkit generates: its FreeBSD glue and its portable part."""

    name: str
    glue: str
    portable: Tuple[str, ...]  # compile anywhere: core and table
    table: str  # the file whose header names the kernel it was made from


PROVIDERS: Dict[str, Provider] = {
    "kinst": Provider("kinst", "kinst_glue.c", ("kinst_core.c", "kinst_table.c"), "kinst_table.c"),
    "dtmalloc": Provider("dtmalloc", "dtmalloc_glue.c", ("dtmalloc_core.c", "dtmalloc_table.c"), "dtmalloc_table.c"),
}


def parse_modules(text: str) -> Tuple[str, ...]:
    """``--modules kinst,dtmalloc``: the names, each one a provider kinstkit builds."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise UserError("--modules: name at least one of " + ", ".join(PROVIDERS))
    for n in names:
        if n not in PROVIDERS:
            raise UserError(f"--modules: unknown module '{n}'; kinstkit builds {', '.join(PROVIDERS)}")
    return names


def generate_module(provider: Provider, srcdir: Path, stampdir: Path, *, kernel: str, functions: Sequence[str],
                    all_functions: bool, extra_kos: Sequence[str]) -> Tuple[List[Path], bool]:
    """Render the provider's sources into ``srcdir`` unless the same inputs made them already.

    Returns the files and whether anything was written.  The key covers the
    kernel and extra .ko contents, the options and kinstkit's own code.
    """
    from generator.image.elf import KernelImage

    material = {
        "provider": provider.name,
        "kernel": KernelImage.open(kernel).sha256(),
        "extra": [sha256_file(Path(k)) for k in extra_kos] if provider.name == "dtmalloc" else [],
        "functions": list(functions) if provider.name == "kinst" else [],
        "all": all_functions if provider.name == "kinst" else False,
        "paths": [kernel, *extra_kos],
        "generator": generator_fingerprint(),
    }
    key = stamp_key(material)
    stamp = stampdir / f"{provider.name}.generated.json"
    old = read_manifest(stamp)
    if old and old.get("key") == key and inputs_current(old.get("files", [])):
        return [Path(f["path"]) for f in old["files"]], False
    if provider.name == "kinst":
        paths = _render_kinst(srcdir, kernel, functions, all_functions)
    else:
        paths = _render_dtmalloc(srcdir, kernel, extra_kos)
    stampdir.mkdir(parents=True, exist_ok=True)
    write_json(stamp, {"key": key, "files": [input_record(p, "generated") for p in paths]})
    return list(paths), True


def _render_kinst(srcdir: Path, kernel: str, functions: Sequence[str], all_functions: bool) -> List[Path]:
    from generator.providers import kinst

    return kinst.generate(kernel, functions, all_functions, srcdir)[1]


def _render_dtmalloc(srcdir: Path, kernel: str, extra_kos: Sequence[str]) -> List[Path]:
    """The sources, headed by the ``generate`` command line that would make the same ones."""
    from generator.providers.dtmalloc import generate as dtmalloc

    return dtmalloc.render(dtmalloc.discover_for(kernel, extra_kos), srcdir)


def stage_makefile(provider: Provider, srcdir: Path) -> Path:
    """The module's hand-written Makefile in ``srcdir`` (copied there when sources are generated elsewhere)."""
    src = MAKEFILES / provider.name / "Makefile"
    dst = srcdir / "Makefile"
    if dst.resolve() != src.resolve():
        if not src.is_file():
            raise UserError(f"{src}: missing; the module Makefile is part of kinstkit")
        if not dst.is_file() or dst.read_bytes() != src.read_bytes():
            shutil.copyfile(src, dst)
    return dst


def table_names_kernel(srcdir: Path, provider: Provider, build_id: Optional[str]) -> Optional[str]:
    """Offline check: the generated table's header names the kernel's build-id.  A failure line, or None."""
    table = srcdir / provider.table
    text = table.read_text(errors="replace") if table.is_file() else ""
    want = build_id or "(none)"
    if f"build-id {want}" not in text:
        return f"{table}: the table does not name kernel build-id {want}; regenerate it"
    return None
