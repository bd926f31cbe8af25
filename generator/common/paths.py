"""Where kinstkit keeps things, relative to the repository it runs from.

One owner for each location: a module that needs the templates, the module
directories or the build tree imports the path from here instead of working
it out from its own ``__file__``.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEMPLATE_DIR = REPO / "templates"  # jinja2 templates, one folder per output family
SYS_MODULES = REPO / "sys" / "modules"  # module directories: hand-written C, Makefiles, generated sources
SAMPLES = REPO / "samples"  # sources of the embedded sample kernel
BUILD = REPO / "build"  # everything kinstkit builds (gitignored)
ENV_CACHE = "KINSTKIT_CACHE"  # where a user points the cache; else the XDG cache folder


def cache_root() -> Path:
    """Downloads and derived inputs: ``$KINSTKIT_CACHE``, else ``$XDG_CACHE_HOME/kinstkit`` (~/.cache/kinstkit).

    Not inside the checkout: an installed kinstkit has no checkout, and every
    worktree of one machine shares the downloads (entries are keyed by content
    and written by rename, so sharing is safe).
    """
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kinstkit"


CACHE = cache_root()
BENCH_RESULTS = REPO / "bench" / "results"  # what `invoke bench` writes
