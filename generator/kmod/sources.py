"""The modules kinstkit builds, and their sources in ``sys/modules/<m>/`` (stage 5, step 1).

Each provider is hand-written C and a hand-written ``bsd.kmod.mk`` Makefile,
committed in ``sys/modules/<m>/`` (ISA-specific files in ``<arch>/``), plus
the C that varies with the target, generated beside them
(each ``providers/<name>/``'s ``Provider.generate``).  ``generate_module`` renders
the generated part unless a stamp says the same kernel, options and kinstkit
code made it already, so an unchanged build does not touch it and nothing
downstream rebuilds; ``stage_sources`` copies the Makefile and the
hand-written C beside sources generated elsewhere (``--src``), so that every
build reads one complete module directory; ``table_names_kernel`` is the
first offline check, that the table was made for this kernel.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import List, Optional, Tuple

from .. import __version__
from ..common.errors import UserError
from ..common.files import write_json
from ..common.paths import PACKAGE, SYS_MODULES, TEMPLATE_DIR
from ..image.elf import KernelImage
from .manifest import input_record, inputs_current, read_manifest, stamp_key
from ..providers import PROVIDERS
from ..providers.contract import Provider, Selection

MODULES = SYS_MODULES  # the committed module directories: Makefiles and hand-written C


def source_dir(provider: Provider) -> Path:
    """Where the provider's hand-written files and Makefile are committed."""
    return MODULES / provider.name


def generate_module(provider: Provider, img: KernelImage, sel: Selection, srcdir: Path,
                    stampdir: Path) -> Tuple[List[Path], bool]:
    """Render the provider's sources into ``srcdir`` unless the same inputs made them already.

    Returns the files and whether anything was written.  The key covers the
    kernel, what the provider says its sources depend on (``Provider.stamp``)
    and kinstkit's own code.
    """
    material = {
        "provider": provider.name,
        "kernel": img.sha256(),
        "path": img.path,
        **provider.stamp(sel),
        "generator": generator_fingerprint(),
    }
    key = stamp_key(material)
    stamp = stampdir / f"{provider.name}.generated.json"
    old = read_manifest(stamp)
    if old and old.get("key") == key and inputs_current(old.get("files", [])):
        return [Path(f["path"]) for f in old["files"]], False
    paths = list(provider.generate(img, sel, srcdir).paths)
    stampdir.mkdir(parents=True, exist_ok=True)
    write_json(stamp, {"key": key, "files": [input_record(p, "generated") for p in paths]})
    return paths, True


def stage_sources(provider: Provider, srcdir: Path) -> List[Path]:
    """The module's Makefile and hand-written C in ``srcdir``, copied there when the sources
    are generated elsewhere (``--src``): a build then reads one complete module directory, as
    ``make`` in ``sys/modules/<m>/`` does.  A copy is rewritten only when it differs."""
    out = []
    for rel in ("Makefile", *provider.plain()):
        src, dst = source_dir(provider) / rel, srcdir / rel
        if dst.resolve() != src.resolve():
            if not src.is_file():
                raise UserError(f"{src}: missing; the module's Makefile and hand-written C are part of kinstkit")
            if not dst.is_file() or dst.read_bytes() != src.read_bytes():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
        out.append(dst)
    return out


def table_names_kernel(srcdir: Path, provider: Provider, build_id: Optional[str]) -> Optional[str]:
    """Offline check: the generated table's header names the kernel's build-id.  A failure line, or None."""
    table = srcdir / provider.table
    text = table.read_text(errors="replace") if table.is_file() else ""
    want = build_id or "(none)"
    if f"build-id {want}" not in text:
        return f"{table}: the table does not name kernel build-id {want}; regenerate it"
    return None


def generator_fingerprint() -> str:
    """sha256 over kinstkit's generator code, its templates and the hand-written module sources
    (``sys/modules/<m>/``: the Makefiles and the C the generated files are built with): a change
    to any of them regenerates.  The generated files there are not part of it."""
    h = hashlib.sha256(__version__.encode())
    files = []
    for base in (PACKAGE, TEMPLATE_DIR):
        files += [(base, p) for p in sorted(base.rglob("*"))
                  if p.is_file() and p.suffix in (".py", ".j2", ".c", ".h") and "__pycache__" not in p.parts]
    for provider in PROVIDERS.values():
        files += [(SYS_MODULES, source_dir(provider) / rel) for rel in ("Makefile", *provider.plain())]
    for base, p in files:
        h.update(str(p.relative_to(base.parent)).encode())
        h.update(p.read_bytes() if p.is_file() else b"(missing)")
    return h.hexdigest()
