"""Each ISA's table kinds are one fact, its ``isa/<arch>/kinds.txt``: the loader that reads it, the checked
names Python code refers to kinds by, and the hand-written core C that switches on the same enumerators.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from generator import isa as isa_registry
from generator.isa import dbp
from generator.isa.contract import load_kinds
from helpers.paths import REPO


def _kinds(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kinds.txt"
    path.write_text(text)
    return path


def test_rows_give_the_kinds_their_enumerators_and_docs_in_order(tmp_path: Path) -> None:
    kinds = load_kinds(_kinds(tmp_path, "# a comment\n\ntrampoline\t| copied\njcc-rel32  JCC32 | jcc: rewritten \n"
                                        "  # another\nc.branch | c.beqz, c.bnez: emulated\n"))
    assert [tuple(k) for k in kinds] == [("trampoline", "KINST_K_TRAMPOLINE", "copied"),
                                         ("jcc-rel32", "KINST_K_JCC32", "jcc: rewritten"),
                                         ("c.branch", "KINST_K_C_BRANCH", "c.beqz, c.bnez: emulated")]
    assert kinds.code("c.branch") == 2 and kinds.names("jcc-rel32", "trampoline") == ("jcc-rel32", "trampoline")


@pytest.mark.parametrize("text, says", [
    ("trampoline | copied\nriprel copied\n", ":2: not a table kind row"),  # no doc column
    ("Trampoline | copied\n", ":1: not a table kind row"),  # a kind is lower case
    ("1jmp | a jump\n", ":1: not a table kind row"),  # a kind starts with a letter
    ("jmp Jmp_X | a jump\n", ":1: not a table kind row"),  # an enumerator is upper case
    ("jmp JMP X | a jump\n", ":1: not a table kind row"),  # a name and an enumerator at most
    ("jmp |  \n", ":1: not a table kind row"),  # an empty doc
    (" jmp | a jump\n", ":1: not a table kind row"),  # a row starts at the margin
    ("jmp JMP | a jump\n", ":1: JMP is what jmp derives: drop it"),  # the enumerator stated twice
    ("b | b\nbl | bl\nb | again\n", ":3: b or KINST_K_B is named twice"),
    ("c.j | c.j\nc-j | c-j\n", ":2: c-j or KINST_K_C_J is named twice"),  # two kinds, one enumerator
    ("skip | refused\n", ":1: skip is the kind of a refused instruction"),
    ("# only a comment\n", ": no table kinds"),
])
def test_a_bad_kinds_file_stops_the_load_naming_file_and_line(tmp_path: Path, text: str, says: str) -> None:
    path = _kinds(tmp_path, text)
    with pytest.raises(ValueError) as err:
        load_kinds(path)
    assert str(err.value).startswith(str(path)) and says in str(err.value), err.value


@pytest.mark.parametrize("name", isa_registry.SUPPORTED)
def test_a_misspelt_kind_fails_where_python_names_it(name: str) -> None:
    kinds = isa_registry.by_name(name).table_kinds
    with pytest.raises(KeyError, match="no table kind 'trampolin'"):
        kinds.names(kinds[0].kind, "trampolin")
    with pytest.raises(KeyError, match="no table kind"):
        kinds.code("skip")
    # A host step's mnemonics are keyed by kind: a key that is none stops the accelerator's making.
    with pytest.raises(KeyError, match="no table kind 'trampolin'"):
        dbp.accelerator(__file__, None, kinds, {"trampolin": ("nop",)})


@pytest.mark.parametrize("name", isa_registry.SUPPORTED)
def test_the_kinds_are_the_enumerators_the_portable_core_switches_on(name: str) -> None:
    """The hand-written core (sys/modules/kinst/<arch>/kinst_core.c) names each kind's enumerator: a row with
    no C behind it, or C for a kind the data lost, fails here rather than in a kernel build."""
    isa = isa_registry.by_name(name)
    core = (REPO / "sys" / "modules" / "kinst" / isa.kmod.kinst_dirs[0] / "kinst_core.c").read_text()
    assert set(re.findall(r"\bKINST_K_\w+", core)) == {k.c_name for k in isa.table_kinds}
