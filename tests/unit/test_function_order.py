"""``functions()`` order: by address, and by name among functions that share one.

The image reader sorts by address alone and then only the runs of equal
addresses by name (``elf._by_address_then_name``); the oracle here is
Python's own sort with the (address, name) key.
"""

from __future__ import annotations

import operator
import random

import pytest

from generator.image.elf import _by_address_then_name
from generator.image.symbols import Function


@pytest.mark.parametrize("seed", range(20))
def test_the_order_is_address_then_name(seed: int) -> None:
    rng = random.Random(seed)
    funcs = [Function(rng.choice("abcde") + str(rng.randint(0, 3)), rng.randint(0, 15), rng.randint(1, 4),
                      "global", None, ".text") for _ in range(rng.randint(0, 60))]
    got = list(funcs)
    _by_address_then_name(got)
    assert got == sorted(funcs, key=operator.attrgetter("address", "name"))


def test_runs_at_the_ends_and_alone() -> None:
    names = ["b", "a", "c", "a"]
    funcs = [Function(n, a, 1, "global", None, ".text") for n, a in zip(names, [7, 7, 1, 9])]
    _by_address_then_name(funcs)
    assert [(f.address, f.name) for f in funcs] == [(1, "c"), (7, "a"), (7, "b"), (9, "a")]
