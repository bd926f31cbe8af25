"""The host programs each backend starts, by name.

One table, read by ``vm.config.validate()`` (are they installed?) and by the
argv builders (what to run), so the two cannot disagree.  It imports nothing,
so validation can read it without importing a backend.
"""

from __future__ import annotations

from typing import Dict

QEMU = "qemu-system-x86_64"
QEMU_IMG = "qemu-img"  # optional: without it the system disk is a sparse copy, not a qcow2 overlay

# bhyve's tools are in FreeBSD's base system; the network ones only serve --network.
BHYVE_TOOLS: Dict[str, str] = {
    "bhyve": "bhyve",
    "bhyvectl": "bhyvectl",
    "bhyveload": "bhyveload",
    "ifconfig": "ifconfig",
    "kldstat": "kldstat",
    "kldload": "kldload",
}
