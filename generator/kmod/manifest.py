"""Manifests and stamps: what a build recorded, and whether the same inputs would make the same thing.

Every ``build/<kernel-build-id>/<m>.ko`` has a ``<m>.json`` beside it: its
inputs with their sha256, the command lines, flags, tool versions and the
check-ko report.  The manifest is also the stamp, so a rebuild with the same
inputs does no work: the ``key`` is a sha256 over what decides the result
(recipe, options, sources, tool versions), and every recorded input must
still hash the same.  The generated sources and the portable-core checks
have stamps of their own, made the same way.

Everything is written through a temporary file and a rename, so an
interrupted build never leaves a half-written manifest or ``.ko`` that a later
one would take as current.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Dict, Optional, Sequence

from ..common.files import sha256_file



# Bumped when the build recipe changes in a way the command lines do not show.
RECIPE = "1"


def input_record(path: Path, role: str) -> Dict[str, str]:
    """One entry of a manifest's ``inputs``: the file, its sha256 and why it is an input."""
    return {"path": str(path), "sha256": sha256_file(path), "role": role}


def inputs_current(inputs: Sequence[Dict[str, str]]) -> bool:
    """True when every recorded input still exists with its recorded sha256."""
    for inp in inputs:
        p = Path(inp["path"])
        if not p.is_file() or sha256_file(p) != inp["sha256"]:
            return False
    return True


def stamp_key(material: Dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def read_manifest(path: Path) -> Optional[Dict[str, object]]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def module_up_to_date(old: Optional[Dict[str, object]], key: str, ko: Path) -> bool:
    """The module's manifest ``old`` vouches for ``ko``: same key, every input and the
    ``.ko`` itself unchanged, and a passed check (a failed one records no key)."""
    return bool(old and old.get("key") == key and ko.is_file() and inputs_current(old.get("inputs", []))
                and old.get("ko", {}).get("sha256") == sha256_file(ko) and old.get("check_ko", {}).get("ok"))
