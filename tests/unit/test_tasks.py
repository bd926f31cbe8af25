"""The invoke tasks and the command line cannot drift apart, and every documented task and flag works.

``tasks.py`` builds its tasks from ``generator.cli.make_parser()``.  These
tests check that every command-line option is a task option, and that every
``invoke ...`` the README and docs/ show is accepted by invoke and turns into
words the command line's own parser accepts.  The task bodies run in this
process with ``generator.cli.main`` replaced by a recorder, so nothing is
built, downloaded or booted.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import List, Tuple

import pytest
from invoke import Context, Program

import tasks
from generator.cli import COMMANDS, make_parser
from generator.common.paths import REPO
from helpers.paths import TESTS, TIERS

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_INVOKE = re.compile(r"(?:python3 -m )?\binvoke ([a-z][a-z-]*)((?: +[^\s`|#]+| +\\\|)*)")


def _subcommands() -> dict:
    action = next(a for a in make_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _run(argv: List[str], monkeypatch) -> List[List[str]]:
    """Run ``invoke ARGV`` with the tasks' call of the command line recorded, not executed."""
    calls: List[List[str]] = []
    monkeypatch.setattr(tasks, "main", lambda words: calls.append(list(words)) or 0)
    Program(namespace=tasks.ns).run(["invoke", *argv], exit=False)
    return calls


def _commands_of(parser: argparse.ArgumentParser) -> list:
    return list(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


def test_command_map_is_what_the_modules_define():
    """``cli.COMMANDS`` names, in order, the commands the modules define; each command alone builds the
    parser of its own module and no other's."""
    assert _commands_of(make_parser()) == list(COMMANDS)
    for command, module in COMMANDS.items():
        alone = _commands_of(make_parser(command))
        assert command in alone and set(alone) == {c for c, m in COMMANDS.items() if m == module}, command
    assert _commands_of(make_parser("no-such-command")) == list(COMMANDS)


def test_every_command_is_a_task():
    assert set(_subcommands()) | {"test"} == set(tasks.ns.task_names)


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_option_is_a_task_option(command, monkeypatch):
    """Each long option of the command, given to its task, reaches the command line unchanged."""
    sub = _subcommands()[command]
    task_args = {a.name for a in tasks.ns[command].get_arguments()}
    for action in sub._actions:
        longs = [s for s in action.option_strings if s.startswith("--") and s != "--help"]
        if not longs:
            continue
        param = longs[0][2:].replace("-", "_")
        assert param in task_args, f"{command} {longs[0]}: no task option"
        flag_only = action.nargs == 0
        value = [] if flag_only else [str(action.choices[0]) if action.choices else "1"]
        positionals = [_positional_value(a) for a in sub._actions
                       if not a.option_strings and a.nargs not in ("?", "...")]
        calls = _run([command, *positionals, longs[0], *value], monkeypatch)
        assert len(calls) == 1 and longs[0] in calls[0], (command, longs[0], calls)


def _positional_value(action: argparse.Action) -> str:
    return str(action.choices[0]) if action.choices else "x"


def _documented() -> List[Tuple[str, str, str]]:
    """(where, task, the rest of the line) for every ``invoke TASK ...`` in the README and docs/.

    A table whose header says ``python3 -m invoke ...`` lists tasks without the
    prefix; their first cells count too.
    """
    out = []
    for path in DOCS:
        in_table = in_block = False
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("```"):
                in_block = not in_block
                continue
            if line.startswith("|") and "invoke ...`" in line:
                in_table = True
                continue
            in_table = in_table and line.startswith("|")
            if in_table:
                code = ["invoke " + line.split("|")[1].replace("`", " ").strip()]
            elif in_block:
                code = [line]
            else:
                code = re.findall(r"`([^`]+)`", line)  # inline code spans; prose is not a command
            for text in code:
                for m in _INVOKE.finditer(text):
                    out.append((f"{path.name}:{n}", m.group(1), m.group(2)))
    return out


def test_docs_show_invoke_commands():
    tasks_shown = {t for _, t, _ in _documented()}
    assert {"probes", "test", "build", "vm-test", "harness", "generate"} <= tasks_shown, tasks_shown


@pytest.mark.parametrize("where, task_name, rest", _documented(), ids=lambda v: v if ":" in str(v) else None)
def test_documented_task_and_flags_are_accepted(where, task_name, rest, monkeypatch):
    """The task exists and takes every --flag the docs show with it; a concrete command line runs."""
    assert task_name in tasks.ns.task_names, f"{where}: no task {task_name}"
    task_args = {a.name for a in tasks.ns[task_name].get_arguments()}
    for flag in re.findall(r"--([a-z][a-z-]*)", rest):
        assert flag.replace("-", "_") in task_args, f"{where}: invoke {task_name} has no --{flag}"
    words = rest.split()
    if any(c in rest for c in "[]<>|\\") or any(w.isupper() or w == "..." for w in words):
        return  # a schematic line: its flags were checked above
    if task_name == "test":
        return  # it runs pytest, not the command line
    required = [a for a in _subcommands()[task_name]._actions if a.required]
    if not words and required:
        return  # the task named in prose, not a command line
    calls = _run([task_name, *words], monkeypatch)
    assert len(calls) == 1 and calls[0][0] == task_name
    make_parser().parse_args(calls[0])  # SystemExit here means the command line would refuse it


def test_an_optional_positional_is_a_task_option(monkeypatch):
    """invoke requires its positionals, so a positional the command line may leave out is a task option
    of its name, handed back in its place."""
    calls = _run(["dscript", "kinst-line", "--target", "vm_fault.c:186", "--kernel", "k"], monkeypatch)
    assert calls == [["dscript", "kinst-line", "vm_fault.c:186", "--kernel", "k"]]
    make_parser().parse_args(calls[0])
    assert _run(["dscript", "dtmalloc-count"], monkeypatch) == [["dscript", "dtmalloc-count"]]


def test_probes_all_summary_as_the_readme_shows(monkeypatch):
    calls = _run(["probes", "--all", "--summary"], monkeypatch)
    assert calls == [["probes", "--all", "--summary"]]


def test_trailing_command_goes_after_a_double_dash(monkeypatch):
    """invoke joins what follows -- with spaces; the task splits it as a shell would."""
    calls = _run(["harness", "--elf", "libz.so", "--all", "--", "python3", "-c", "'print(1)'"], monkeypatch)
    assert calls == [["harness", "--elf", "libz.so", "--all", "--", "python3", "-c", "print(1)"]]


def test_a_failing_command_fails_the_task(monkeypatch):
    monkeypatch.setattr(tasks, "main", lambda words: 2)
    with pytest.raises(SystemExit) as e:
        Program(namespace=tasks.ns).run(["invoke", "probes", "--function", "nosuch"])
    assert e.value.code == 2


def _test_task(argv: List[str], monkeypatch) -> List[str]:
    """The pytest command line ``invoke test ARGV`` would run (recorded, not run)."""
    ran: List[str] = []
    monkeypatch.setattr(Context, "run", lambda self, command, **kw: ran.append(command))
    Program(namespace=tasks.ns).run(["invoke", "test", *argv], exit=False)
    assert len(ran) == 1, ran
    return shlex.split(ran[0])[1:]


def test_test_task_selects_tiers_by_marker(monkeypatch):
    """Every tier but slow tests by default (what CI runs); --tier, repeated or comma-separated, narrows it."""
    assert _test_task([], monkeypatch) == ["-m", "pytest", "-q", "-m", "not slow"]
    assert _test_task(["--tier", "unit"], monkeypatch)[-2:] == ["-m", "unit and not slow"]
    assert _test_task(["--tier", "vm,unit"], monkeypatch)[-2:] == ["-m", "(unit or vm) and not slow"]
    assert _test_task(["--tier", "toolchain", "--tier", "vm", "--slow"], monkeypatch)[-2:] == ["-m", "toolchain or vm"]
    assert _test_task(["--slow", "-k", "oracle"], monkeypatch) == ["-m", "pytest", "-q", "-k", "oracle"]
    with pytest.raises(SystemExit) as e:
        Program(namespace=tasks.ns).run(["invoke", "test", "--tier", "units"])
    assert e.value.code == 2


def test_tiers_are_the_folders_and_the_markers():
    """tasks.py's tiers, the folders of tests/ holding tests and the markers pyproject.toml registers: one list."""
    folders = sorted(d.name for d in TESTS.iterdir() if d.is_dir() and any(d.glob("test_*.py")))
    block = re.search(r"^markers = \[(.*?)^\]", (REPO / "pyproject.toml").read_text(), re.S | re.M).group(1)
    markers = sorted(set(re.findall(r'^\s*"(\w+):', block, re.M)) - {"slow"})
    assert sorted(tasks.TIERS) == sorted(TIERS) == folders == markers
