"""Text and JSON views of a malloc-type discovery: what ``malloc-types`` prints."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence

from .mallocs import Discovery, MallocType

COLUMNS = ("PROBE", "SYMBOL", "BINDING", "FILE", "ADDRESS", "SHORTDESC")
MAX_WIDTH = 40  # a longer cell overflows its column rather than widening every row


def type_dict(t: MallocType) -> Dict[str, Any]:
    """The JSON object of one type: the documented keys, plus the conditional ones where they apply."""
    out: Dict[str, Any] = {
        "name": t.name,
        "probe": t.probe,
        "symbol": t.symbol,
        "binding": t.binding,
        "file": t.file,
        "address": t.address,
    }
    if t.duplicate_of is not None:
        ref = t.duplicate_of
        out["duplicate_of"] = {"symbol": ref.symbol, "file": ref.file, "address": ref.address}
    if t.version_mismatch:
        out["version_mismatch"] = {"found": t.ident, "expected": t.expected_ident}
    return out


def header_line(d: Discovery) -> str:
    lay = d.layout
    rel = d.version.release
    where = f"osreldate {d.version.osreldate}" if d.version.osreldate is not None else "from its layouts"
    return (
        f"{d.kernel}: {rel} ({where}); struct malloc_type {lay.malloc_type.name} {lay.ident}, "
        f"{lay.malloc_type.size} bytes; struct sysinit {lay.sysinit.name}, {lay.sysinit.size} bytes"
    )


def _file(path: str, d: Discovery) -> str:
    """The kernel is named in the header line; modules by the path given."""
    return "kernel" if path == d.kernel else path


def _row(t: MallocType, d: Discovery) -> List[str]:
    return [
        f"dtmalloc::{t.probe}:",
        t.qualified,
        t.binding or "-",
        _file(t.file, d),
        f"{t.address:#x}",
        json.dumps(t.name),
    ]


def _notes(t: MallocType, d: Discovery) -> List[str]:
    out = []
    if t.version_mismatch:
        out.append(
            f"    ks_version mismatch: {t.ident}, the kernel expects {t.expected_ident}; malloc_init() panics on it"
        )
    if t.duplicate_of is not None:
        w = next(x for x in d.types if x.ref() == t.duplicate_of)
        out.append(f"    duplicate probe name: stock dtmalloc gives dtmalloc::{t.probe}: to {w.qualified} in {_file(w.file, d)}")
    return out


def text_lines(d: Discovery) -> List[str]:
    """A table in registration order, a note under each flagged type, and a summary."""
    rows = [list(COLUMNS)] + [_row(t, d) for t in d.types]
    widths = [min(MAX_WIDTH, max(len(r[i]) for r in rows)) for i in range(len(COLUMNS) - 1)]
    lines = [header_line(d)]
    lines.append(_format(rows[0], widths))
    for t, row in zip(d.types, rows[1:]):
        lines.append(_format(row, widths))
        lines += _notes(t, d)
    dups = sum(1 for t in d.types if t.duplicate_of is not None)
    bad = sum(1 for t in d.types if t.version_mismatch)
    files = 1 + len(d.modules)
    lines.append(
        f"{len(d.types)} malloc types in {files} file{'s' if files > 1 else ''}: {len(d.probed)} probe names, "
        f"{dups} duplicate{'' if dups == 1 else 's'}, {bad} ks_version mismatch{'' if bad == 1 else 'es'}"
    )
    return lines


def _format(row: Sequence[str], widths: Sequence[int]) -> str:
    cells = [c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]
    return "  ".join(cells).rstrip()
