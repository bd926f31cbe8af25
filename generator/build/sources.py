"""The modules kinstkit builds, and their sources in ``sys/modules/<m>/`` (stage 5, step 1).

Each provider is hand-written C and a hand-written ``bsd.kmod.mk`` Makefile,
committed in ``sys/modules/<m>/`` (ISA-specific files in ``<arch>/``), plus
the C that varies with the target, generated beside them
(``providers.kinst``, ``providers.dtmalloc``).  ``generate_module`` renders
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
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from generator.common.errors import UserError
from generator import __version__
from generator.build.manifest import input_record, inputs_current, read_manifest, sha256_file, stamp_key
from generator.common.files import write_json
from generator.common.paths import REPO, SYS_MODULES

MODULES = SYS_MODULES  # the committed module directories: Makefiles and hand-written C


@dataclass(frozen=True)
class Provider:
    """A module kinstkit builds.  Paths are relative to its module directory."""

    name: str
    plain: Tuple[str, ...]  # hand-written C, committed in sys/modules/<name>/ (ISA files in <arch>/)
    portable: Tuple[str, ...]  # compile anywhere, without kernel headers: core, table, target data
    includes: Tuple[str, ...]  # directories the portable sources' headers are in
    table: str  # the file whose header names the kernel it was made from

    @property
    def source_dir(self) -> Path:
        """Where the hand-written files and the Makefile are committed."""
        return MODULES / self.name


# One record per name in generator.common.defaults.PROVIDER_NAMES (a test holds them equal).
PROVIDERS: Dict[str, Provider] = {
    "kinst": Provider(
        "kinst",
        plain=("kinst.c", "kinst.h", "kinst_funcs.c", "kinst_funcs.h", "kinst_target.h", "amd64/kinst_core.c",
               "amd64/kinst_core.h", "amd64/kinst_isa.c", "amd64/kinst_isa.h",
               *(f"{arch}/{name}" for arch in ("arm64", "riscv")
                 for name in ("kinst_core.c", "kinst_core.h", "kinst_isa.c", "kinst_isa.h")),
               *(f"dbp/{name}" for name in ("kinst_core_dbp.c", "kinst_core_dbp.h", "kinst_dbp.c", "kinst_dbp.h",
                                            "kinst_tramp.c"))),
        portable=("kinst_funcs.c", "amd64/kinst_core.c", "kinst_table.c", "kinst_target.c"),
        includes=(".", "amd64"),
        table="kinst_table.c",
    ),
    "dtmalloc": Provider(
        "dtmalloc",
        plain=("dtmalloc.c", "dtmalloc_core.c", "dtmalloc_core.h"),
        portable=("dtmalloc_core.c", "dtmalloc_table.c"),
        includes=(".",),
        table="dtmalloc_table.c",
    ),
}


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


def stage_sources(provider: Provider, srcdir: Path) -> List[Path]:
    """The module's Makefile and hand-written C in ``srcdir``, copied there when the sources
    are generated elsewhere (``--src``): a build then reads one complete module directory, as
    ``make`` in ``sys/modules/<m>/`` does.  A copy is rewritten only when it differs."""
    out = []
    for rel in ("Makefile", *provider.plain):
        src, dst = provider.source_dir / rel, srcdir / rel
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
    for base in (REPO / "generator", REPO / "templates"):
        files += [p for p in sorted(base.rglob("*"))
                  if p.is_file() and p.suffix in (".py", ".j2", ".c", ".h") and "__pycache__" not in p.parts]
    for provider in PROVIDERS.values():
        files += [provider.source_dir / rel for rel in ("Makefile", *provider.plain)]
    for p in files:
        h.update(str(p.relative_to(REPO)).encode())
        h.update(p.read_bytes() if p.is_file() else b"(missing)")
    return h.hexdigest()
