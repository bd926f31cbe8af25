"""What vm/ takes from ``generator.common``: kinstkit's paths, its error type and its downloader.

In a checkout ``vm/`` and ``generator/`` are sibling folders; installed, the
distribution maps them to ``kinstkit.vm`` and ``kinstkit`` (it claims no
top-level ``generator`` or ``vm`` in site-packages).  The same modules are
found either way.
"""

from __future__ import annotations

try:  # installed: kinstkit.vm, beside kinstkit.common
    from ..common import errors, fetch, paths  # type: ignore[misc]
except ImportError:  # a checkout: vm and generator are top-level packages
    from generator.common import errors, fetch, paths  # noqa: F401

__all__ = ["errors", "fetch", "paths"]
