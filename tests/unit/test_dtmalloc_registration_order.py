"""The order in which the kernel registers malloc types: each release's SYSINIT sort, replayed.

dtmalloc's probe names follow the order the types register in, so a
duplicate name goes to the type that registers last.  The sort is replayed
here on hand-made records; tests/toolchain/test_dtmalloc_discovery.py checks
the result on compiled kernels and modules.
"""

from __future__ import annotations

from generator.providers.dtmalloc import layouts as L
from generator.providers.dtmalloc.mallocs import Pointer, Sysinit, registration_order


def test_registration_order_replays_each_sort() -> None:
    def si(pos: int, sub: int) -> Sysinit:
        return Sysinit(pos, pos, sub, 0, Pointer(0, None), Pointer(0, None), False)

    a, b, c = si(0, 2), si(1, 2), si(2, 1)
    # The array-era exchange sort swaps a past b: equal keys come out reversed.
    assert registration_order([a, b, c], L.SYSINIT_LAYOUTS["array"]) == [c, b, a]
    assert registration_order([a, b, c], L.SYSINIT_LAYOUTS["stailq"]) == [c, a, b]
