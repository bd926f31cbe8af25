"""Where the tests' own files are: one owner for each location.

The repository's locations come from ``generator.common.paths``; this adds
the test tree's.  The fixture sources stay under ``tests/fixtures/``; the
Python that builds them lives in this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

from generator.common.paths import CACHE, REPO

TESTS = REPO / "tests"
TIERS = ("unit", "toolchain", "vm")  # one folder of tests each, and the marker conftest.py gives them
FIXTURES = TESTS / "fixtures"
DTMALLOC_FIXTURES = FIXTURES / "dtmalloc"  # FreeBSD-shaped kernel and module sources, stub sys/ headers
HARNESS_FIXTURES = FIXTURES / "harness"  # libkfix and its drivers, the zlib round trip
KINST_FIXTURES = FIXTURES / "kinst"  # stand-in kernel headers and services for the kinst glue
KO_FIXTURES = FIXTURES / "ko"  # .ko-shaped module, kernel and dependency sources
KO_STANDIN = KO_FIXTURES / "standin"  # the files of the stand-in FreeBSD sys/ tree
CORPUS_CACHE = CACHE / "corpus"  # downloaded real inputs (gitignored)
HEADER_CACHE = CACHE / "freebsd-headers"  # the ziglang wheels and the FreeBSD header trees made of them


def hand_written_c() -> List[Path]:
    """Every hand-written C file: the providers' lists (sys/modules/<m>/) and the harness glue."""
    from generator.kmod.sources import source_dir
    from generator.providers import PROVIDERS
    from generator.run.harness import GLUE_DIR

    files = [source_dir(p) / rel for p in PROVIDERS.values() for rel in p.plain()]
    return files + sorted(GLUE_DIR.rglob("*.[ch]"))
