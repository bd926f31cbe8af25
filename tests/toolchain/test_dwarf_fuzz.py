"""Bad DWARF gives one line and exit 2, never a traceback, and always ends: the DWARF commands (``--line``,
``--inline``, ``--function F --lines``, ``--vars``) on mutated copies of real ``-g`` images -- the sample
kernel (DWARF 4: ``.debug_loc``, ``.debug_ranges``) and Lua 5.4 built ``-O2`` by this machine's gcc (DWARF 5:
``.debug_loclists``, ``.debug_rnglists``, ``.debug_line_str``) -- with random flips and truncations of every
debug section, location lists pointing past their section, undefined operations, type cycles and DIE
reference loops (``helpers.dwarffuzz``).  A bounded number of mutations here; ``slow`` runs more seeds."""

from __future__ import annotations

from collections import Counter

import pytest

from helpers.dwarffuzz import bad, mutants, run_all
from helpers.luanative import lua_native

SAMPLE_COMMANDS = (["--line", "vm_fault.c:186", "--json"], ["--inline", "__curthread"],
                   ["--function", "vm_fault", "--lines"], ["--line", "vm_fault.c:186", "--vars", "--json"],
                   ["--function", "vm_fault", "--offset", "0", "--vars"])
LUA_COMMANDS = (["--line", "ltable.c:763", "--json"], ["--inline", "luaH_getshortstr"],
                ["--function", "luaH_get", "--lines"], ["--line", "ltable.c:763", "--vars", "--json"],
                ["--function", "luaH_newkey", "--offset", "0", "--vars"])


def _fuzz(image, commands, tmp_path, seed: int, flips: int, truncations: int) -> Counter:
    made = mutants(image, tmp_path, seed, flips, truncations)
    kinds = {m.kind for m in made}
    assert {"loclist-past-end", "unknown-op", "type-cycle", "die-ref-loop"} <= kinds, sorted(kinds)
    jobs = [(m.kind, ["probes", "--kernel", str(m.path), *c]) for m in made for c in commands]
    outcomes = run_all(jobs)
    assert len(outcomes) == len(jobs), "the driver died before every command ran"
    wrong = bad(outcomes)
    assert not wrong, f"{len(wrong)} of {len(outcomes)} runs broke the rule:\n" + "\n".join(wrong[:10])
    return Counter("error" if o.rc == 2 else "answer" for o in outcomes)


def test_clean_images_answer(sample_kernel):
    """The commands the fuzz uses answer on the unmutated images (so an exit 2 there is the mutation's)."""
    from helpers.dwarffuzz import run_all as run

    lib = lua_native("-O2")["lib"]
    jobs = [("clean", ["probes", "--kernel", str(sample_kernel), *c]) for c in SAMPLE_COMMANDS]
    jobs += [("clean", ["probes", "--kernel", str(lib), *c]) for c in LUA_COMMANDS]
    assert [o.rc for o in run(jobs)] == [0] * len(jobs)


def test_mutated_sample_kernel(sample_kernel, tmp_path):
    got = _fuzz(sample_kernel, SAMPLE_COMMANDS, tmp_path, seed=23, flips=16, truncations=8)
    assert got["error"] > 0, got


def test_mutated_lua(tmp_path):
    got = _fuzz(lua_native("-O2")["lib"], LUA_COMMANDS, tmp_path, seed=5, flips=8, truncations=4)
    assert got["error"] > 0, got


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 104))
def test_more_mutations(sample_kernel, tmp_path, seed):
    (tmp_path / "k").mkdir()
    (tmp_path / "l").mkdir()
    _fuzz(sample_kernel, SAMPLE_COMMANDS, tmp_path / "k", seed, flips=60, truncations=30)
    _fuzz(lua_native("-O2")["lib"], LUA_COMMANDS, tmp_path / "l", seed, flips=30, truncations=15)
