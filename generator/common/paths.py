"""Where kinstkit keeps things, relative to the repository it runs from.

One owner for each location: a module that needs the templates, the module
directories or the build tree imports the path from here instead of working
it out from its own ``__file__``.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEMPLATE_DIR = REPO / "templates"  # jinja2 templates, one folder per output family
SYS_MODULES = REPO / "sys" / "modules"  # module directories: hand-written C, Makefiles, generated sources
SAMPLES = REPO / "samples"  # sources of the embedded sample kernel
BUILD = REPO / "build"  # everything kinstkit builds (gitignored)
CACHE = REPO / ".cache"  # downloads and derived inputs (gitignored)
BENCH_RESULTS = REPO / "bench" / "results"  # what `invoke bench` writes
