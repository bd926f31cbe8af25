"""Shared fixtures: the embedded sample kernel and the real-world corpora.

Every fixture whose input can be missing skips with a reason that names the
input (``helpers.skips``); none of them fakes one.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from helpers import skips


@pytest.fixture(scope="session")
def sample_kernel() -> Path:
    """The embedded sample kernel, built once per session."""
    skips.require_sample_toolchain()
    from generator.image.sample import sample_kernel as build

    return build()


@pytest.fixture(scope="session")
def debian_modules() -> List[Path]:
    """A deterministic selection of Debian's linux-image .ko modules.

    The 30 largest (most code) plus every 100th by name, so the selection
    covers big drivers and a spread of small ones.
    """
    from helpers.corpus import debian_kernel_modules

    mods = sorted(debian_kernel_modules())
    largest = sorted(mods, key=lambda p: p.stat().st_size, reverse=True)[:30]
    spread = mods[::100]
    return sorted(set(largest) | set(spread))


@pytest.fixture(scope="session")
def dtmalloc_listing(sample_kernel, tmp_path_factory) -> Path:
    """The `dtrace -l`-style dtmalloc listing kinstkit predicts for the sample kernel.

    Generated here, so tests never depend on files a developer happened to
    leave in sys/modules/dtmalloc/.
    """
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("dtmalloc")
    subprocess.run(
        [sys.executable, "-m", "generator", "generate", "--provider", "dtmalloc", "--kernel", str(sample_kernel),
         "--out", str(out)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    listing = out / "dtmalloc.list"
    assert listing.exists()
    return listing
