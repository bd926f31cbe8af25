"""Facts about the machine kinstkit runs on."""

from __future__ import annotations

import os
import sys


def on_freebsd() -> bool:
    """True on a FreeBSD host, where bsd.kmod.mk, kldload and bhyve exist."""
    return os.uname().sysname == "FreeBSD"


def progress_wanted(quiet: bool = False) -> bool:
    """Progress goes to a terminal only: never when ``quiet`` (JSON mode) or under CI."""
    return not quiet and not os.environ.get("CI") and sys.stderr.isatty()
