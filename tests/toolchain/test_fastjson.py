"""``probes --all --json`` writes exactly what the per-function report gives, on real images.

The whole-image JSON writer (``analysis.fastjson``) classifies each distinct
encoding once and pastes fragments; the per-function path builds a ``Probe``
per instruction and a dict per probe.  Their bytes must be equal.
"""

from __future__ import annotations

import pytest

from generator.analysis import report
from generator.analysis.fastjson import ImageJson
from generator.analysis.probes import analyse
from generator.image.elf import KernelImage
from helpers.skips import require_system_library


def _differences(path: str, rule: str = "any", limit: int = 0):
    img = KernelImage.open(path)
    funcs = img.functions()[:limit] if limit else img.functions()
    writer = ImageJson(img, rule)
    bad = [f.name for f in funcs if writer.function(f) != report.function_json(analyse(img, f, rule))]
    return len(funcs), bad


def test_sample_kernel(sample_kernel):
    for rule in ("any", "first"):
        n, bad = _differences(str(sample_kernel), rule)
        assert n > 20 and not bad, bad[:5]


@pytest.mark.parametrize("lib", ["libz.so.1", "libcrypto.so.3"])
def test_system_libraries(lib):
    n, bad = _differences(str(require_system_library(lib)), limit=600)
    assert n > 50 and not bad, bad[:5]


def test_debian_kernel_modules(debian_modules):
    """ET_REL: relocated call targets named by symbol, as the per-function path names them."""
    total = 0
    for ko in debian_modules[:6]:
        n, bad = _differences(str(ko))
        assert not bad, (ko.name, bad[:5])
        total += n
    assert total > 100
