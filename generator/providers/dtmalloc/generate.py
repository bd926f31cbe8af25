"""Stage 4 (dtmalloc): turn a ``Discovery`` into the rows the templates print.

The templates under ``templates/dtmalloc/`` only loop and substitute, so every
decision is made here: which types go into the ahead-of-time table and in what
order (sorted by probe name, byte by byte, for the core's binary search), how
a description is spelled as a C string or in Markdown, which compile-time
checks pin the build to the target kernel, and the ``dtrace -l``-style lines.

Only what varies with the target is generated (``dtmalloc_table.c``,
``dtmalloc_target.h``, ``dtmalloc_abi.h``, the listing and the types
document); the glue (``dtmalloc.c``) and the portable core
(``dtmalloc_core.[ch]``) are hand-written and committed in
``sys/modules/dtmalloc/``.

The table is a report, not the provider's list of types: the module creates
probes from the kernel's live malloc-type list, like stock dtmalloc, so types
that appear after generation still get probes.  At load the glue compares
the live list with the table and says what differs.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from . import layouts as L
from ...common.errors import UserError
from ...common.paths import MODULES_OUT
from .mallocs import Discovery, MallocType, discover, probe_bytes
from ...render import Input, remove_outdated, render_tree

PROVIDER = "dtmalloc"
PROBE_NAMES = ("malloc", "free")
TEMPLATE_DIR = "dtmalloc"
DEFAULT_OUT = MODULES_OUT / PROVIDER
# What kinstkit generated before the fixed C was committed; removed from the output directory.
OUTDATED = ("dtmalloc_glue.c", "dtmalloc_core.c", "dtmalloc_core.h")

# dtrace(1) -l: "%5s %10s %17s %33s %s" (ID PROVIDER MODULE FUNCTION NAME).
LISTING_FORMAT = "{id:>5} {provider:>10} {module:>17} {function:>33} {name}"


@dataclass(frozen=True)
class KnownRow:
    """One entry of the generated table: a type that gets probes."""

    index: int
    probe: bytes  # the probe's function name, as stock dtmalloc spells it
    name: bytes  # ks_shortdesc, exactly as the kernel holds it
    symbol: str
    file: str


@dataclass(frozen=True)
class DocRow:
    """One line of the generated doc's table: every type, duplicates included."""

    probe_md: str
    name_md: str
    symbol_md: str
    binding: str
    file_md: str
    note: str


@dataclass(frozen=True)
class Check:
    """A compile-time assertion the glue makes against the headers it is built with (``dtmalloc_abi.h``)."""

    expr: str
    why: str


def md_code(text: str) -> str:
    """``text`` as Markdown inline code in a table cell, whitespace made visible."""
    shown = text.encode("unicode_escape").decode("ascii").replace("|", "\\|").replace("`", "'")
    return f"`{shown}`"


def _display_file(path: str, kernel: str) -> str:
    return "kernel" if path == kernel else os.path.basename(path)


def known_rows(d: Discovery) -> List[KnownRow]:
    """The probed types sorted by probe name as unsigned bytes (what strcmp orders by)."""
    probed = sorted(d.probed, key=lambda t: probe_bytes(t.raw))
    return [
        KnownRow(
            index=i,
            probe=probe_bytes(t.raw),
            name=t.raw,
            symbol=t.qualified,
            file=_display_file(t.file, d.kernel),
        )
        for i, t in enumerate(probed)
    ]


def _note(t: MallocType, d: Discovery) -> str:
    if t.version_mismatch:
        return f"{d.layout.malloc_type.name} {t.ident} != {t.expected_ident}: malloc_init() panics on it"
    if t.duplicate_of is not None:
        winner = next(w for w in d.types if w.ref() == t.duplicate_of)
        return f"duplicate: probes go to {winner.qualified} in {_display_file(winner.file, d.kernel)}"
    return ""


def doc_rows(d: Discovery) -> List[DocRow]:
    return [
        DocRow(
            probe_md=md_code(f"{PROVIDER}::{t.probe}:"),
            name_md=md_code(t.name),
            symbol_md=md_code(t.qualified),
            binding=t.binding or "-",
            file_md=md_code(_display_file(t.file, d.kernel)),
            note=_note(t, d),
        )
        for t in d.types
    ]


def listing_lines(d: Discovery) -> List[str]:
    """What ``dtrace -l -P dtmalloc`` would print for the types known now.

    Stock dtmalloc creates probes walking the malloc-type list from its head,
    newest type first, "malloc" before "free"; IDs are assigned by the running
    dtrace framework and cannot be known ahead of time, so they print as "-".
    """
    lines = [LISTING_FORMAT.format(id="ID", provider="PROVIDER", module="MODULE", function="FUNCTION", name="NAME")]
    for t in reversed(d.probed):
        for name in PROBE_NAMES:
            lines.append(LISTING_FORMAT.format(id="-", provider=PROVIDER, module="", function=t.probe, name=name))
    return lines


def target_release(d: Discovery) -> L.Release:
    """The table row to generate for; UserError when kinstkit does not generate for it."""
    rel = d.layout.release
    if rel is None:
        major = d.version.major
        rel = next((r for r in L.RELEASES if r.major == major), None)
    if rel is None or not rel.generate:
        name = f"FreeBSD {rel.major}" if rel else d.version.release
        raise UserError(
            f"{d.kernel}: kinstkit does not generate a dtmalloc provider for {name} "
            f"({rel.note if rel else 'no layout row'}); `malloc-types` still lists its types"
        )
    if d.layout.malloc_type.fixed_ident is not None:
        raise UserError(f"{d.kernel}: the generated provider needs the ks_version malloc_type layout (FreeBSD 13+)")
    return rel


def checks(d: Discovery, rel: L.Release) -> List[Check]:
    """What the glue asserts about the headers it is compiled against.

    A module built from a sys/ tree other than the target kernel's fails at
    kldload, on the target; these make it fail at compile time instead.
    """
    mt, si = d.layout.malloc_type, d.layout.sysinit
    out = [
        Check(f"M_VERSION == {d.layout.ident}UL", "The kernel's types carry this ks_version."),
        Check(f"sizeof(struct malloc_type) == {mt.size}", "The size of the kernel's MALLOC_DEFINE objects."),
        Check(f"__offsetof(struct malloc_type, {mt.name}) == {mt.ident_offset}", "Where malloc_init() checks it."),
        Check(f"__offsetof(struct malloc_type, ks_shortdesc) == {mt.shortdesc_offset}", "The probe name's source."),
        Check(f"sizeof(struct sysinit) == {si.size}", f"The kernel's struct sysinit ({si.name} layout)."),
        Check(f"__FreeBSD_version / 100000 == {rel.major}", f"The kernel is FreeBSD {rel.major}."),
        Check("DTRACE_FUNCNAMELEN == DTMALLOC_FUNCNAMELEN", "The core truncates probe names to this."),
    ]
    if d.version.osreldate is not None:
        out.append(
            Check(
                f"__FreeBSD_version <= {d.version.osreldate}",
                "The kernel linker refuses a module built against newer headers.",
            )
        )
    return out


def context(d: Discovery) -> Dict[str, Any]:
    """Everything the templates substitute."""
    rel = target_release(d)
    known = known_rows(d)
    if not known:
        raise UserError(f"{d.kernel}: no malloc type would get probes (every one has a ks_version mismatch)")
    mt, si = d.layout.malloc_type, d.layout.sysinit
    return {
        "provider": PROVIDER,
        "release": d.version.release,
        "release_source": d.version.source,
        "major": rel.major,
        "osreldate": d.version.osreldate if d.version.osreldate is not None else "unknown",
        "m_version": d.layout.ident,
        "malloc_type_layout": mt.name,
        "malloc_type_size": mt.size,
        "sysinit_layout": si.name,
        "sysinit_size": si.size,
        "mtip": mt.mtip,
        "funcnamelen": L.DTRACE_FUNCNAMELEN,
        "known": known,
        "nknown": len(known),
        "ntypes": len(d.types),
        "nduplicates": sum(1 for t in d.types if t.duplicate_of is not None),
        "nmismatches": sum(1 for t in d.types if t.version_mismatch),
        "types": doc_rows(d),
        "checks": checks(d, rel),
        "listing": listing_lines(d),
        "warnings": list(d.warnings) or ["none"],
        "files": [d.kernel, *d.modules],
    }


def inputs_of(d: Discovery) -> List[Input]:
    """Provenance of each input file (the kernel, then the modules) for the generated headers."""
    return [Input(img.path, img.build_id or "", img.sha256()) for img in d.images]


def command_line(kernel: str, modules: Sequence[str]) -> str:
    """The canonical command for the generated headers: inputs only, never the output directory."""
    words = ["python", "-m", "generator", "generate", "--provider", PROVIDER, "--kernel", kernel]
    for m in modules:
        words += ["--module", m]
    return " ".join(shlex.quote(w) for w in words)


def discover_for(kernel: str, modules: Sequence[str]) -> Discovery:
    """The malloc types of ``kernel`` and ``modules``; UserError unless kinstkit generates for that release."""
    d = discover(kernel, list(modules))
    target_release(d)
    return d


def render(d: Discovery, out_dir: Optional[Path] = None) -> List[Path]:
    """Render ``templates/dtmalloc/`` for ``d`` into ``out_dir``; return the files written."""
    ctx = context(d)
    command = command_line(d.kernel, d.modules)
    paths = render_tree(TEMPLATE_DIR, out_dir or DEFAULT_OUT, ctx, inputs_of(d), command)
    remove_outdated(out_dir or DEFAULT_OUT, OUTDATED)
    return paths
