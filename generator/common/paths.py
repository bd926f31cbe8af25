"""Where kinstkit keeps things: its data (a checkout's, or the installed package's), outputs and cache.

One owner for each location: a module that needs the templates, the module
directories or the build tree imports the path from here instead of working
it out from its own ``__file__``.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # the code: generator/ in a checkout, kinstkit/ installed
_ROOT = PACKAGE.parent
# A checkout has the templates, module directories and samples beside generator/; an installed kinstkit
# ships them in the package (setup.py maps them to kinstkit/data/).
CHECKOUT = (_ROOT / "pyproject.toml").is_file() and (_ROOT / "templates").is_dir()
DATA = _ROOT if CHECKOUT else PACKAGE / "data"
REPO = _ROOT if CHECKOUT else Path.cwd()  # where results go: the checkout, else the current folder
TEMPLATE_DIR = DATA / "templates"  # jinja2 templates, one folder per output family
SYS_MODULES = DATA / "sys" / "modules"  # module directories: hand-written C and Makefiles (read)
MODULES_OUT = REPO / "sys" / "modules"  # where generate writes a provider's sources unless told (--out, --src)
SAMPLES = DATA / "samples"  # sources of the embedded sample kernel
BUILD = REPO / "build"  # everything kinstkit builds for the user: .ko files and manifests (gitignored)
BENCH_RESULTS = REPO / "bench" / "results"  # what `invoke bench` writes
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
