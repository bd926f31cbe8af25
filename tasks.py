"""invoke tasks: the user interface.

Every task but ``test`` is made from the command line's own parser
(``generator.cli.make_parser()``): one task per subcommand, one task option
per command-line option, with the same help.  A task therefore accepts
exactly what ``python -m generator <command>`` accepts and can never drift
from it; the task body hands the words back to ``generator.cli.main`` in this
process.  ``invoke --list`` shows the tasks and ``invoke --help TASK`` their
options.  With no ``--kernel`` the tasks work on the embedded sample kernel.

Anything after ``--`` is passed on as the command's trailing arguments
(``invoke harness --elf LIB --all -- CMD ARGS``).
"""

from __future__ import annotations

import argparse
import inspect
import shlex
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from invoke import Collection, Task, task
from invoke.exceptions import Exit

from generator.cli import main, make_parser

_FLAG_ACTIONS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction)


@dataclass(frozen=True)
class Option:
    """One command-line option or positional, as a task parameter."""

    param: str  # the task's parameter name (invoke shows it as --param-name)
    flag: Optional[str]  # the option string to hand back; None for a positional
    kind: str  # "flag", "value", "list", "positional", "optional" (a positional that may be left out) or "rest"
    help: str


def _options(parser: argparse.ArgumentParser) -> List[Option]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        text = (action.help or "").replace("%%", "%")
        if not action.option_strings:
            # invoke requires every positional it is told of, so one the command line may leave out
            # (nargs "?") becomes a task option of its name, handed back positionally.
            kind = {argparse.REMAINDER: "rest", argparse.OPTIONAL: "optional"}.get(action.nargs, "positional")
            out.append(Option(action.dest, None, kind, text))
            continue
        flag = next((s for s in action.option_strings if s.startswith("--")), action.option_strings[0])
        param = flag.lstrip("-").replace("-", "_")
        if isinstance(action, _FLAG_ACTIONS):
            kind = "flag"
        elif isinstance(action, argparse._AppendAction):
            kind = "list"
        else:
            kind = "value"
        out.append(Option(param, flag, kind, text))
    return out


def _words(options: List[Option], given: Dict[str, object], rest: str) -> List[str]:
    """The command-line words for the options a task was given, in the parser's order."""
    words: List[str] = []
    for opt in options:
        value = given.get(opt.param)
        if opt.kind == "rest":
            words += ["--", *shlex.split(rest)] if rest else []
        elif opt.kind in ("positional", "optional"):
            words += [str(value)] if value is not None else []
        elif opt.kind == "flag":
            words += [opt.flag] if value else []
        elif opt.kind == "list":
            words += [w for v in value or [] for w in (opt.flag, str(v))]
        elif value is not None:
            words += [opt.flag, str(value)]
    return words


def _task(command: str, parser: argparse.ArgumentParser) -> Task:
    """The invoke task for one subcommand of ``python -m generator``."""
    options = _options(parser)

    def body(c, **given) -> None:
        rc = main([command, *_words(options, given, getattr(c, "remainder", ""))])
        if rc:
            raise Exit(code=rc)

    params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for opt in options:
        if opt.kind == "rest":
            continue
        default = False if opt.kind == "flag" else None
        params.append(inspect.Parameter(opt.param, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    body.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    body.__name__ = command.replace("-", "_")
    body.__doc__ = (parser.description or "").strip() or None
    return Task(
        body,
        name=command,
        help={o.param: o.help for o in options if o.kind != "rest"},
        positional=[o.param for o in options if o.kind == "positional"],
        iterable=[o.param for o in options if o.kind == "list"],
        auto_shortflags=False,
    )


def _subparsers(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps: Dict[str, str] = {ch.dest: ch.help or "" for ch in action._choices_actions}
    out = {}
    for name, sub in action.choices.items():
        short, long = helps.get(name, ""), (sub.description or "").strip()
        sub.description = short + (f"\n\n{long}" if long and long != short else "")
        out[name] = sub
    return out


TIERS = ("unit", "toolchain", "vm")  # the folders of tests/ and the markers tests/conftest.py gives by folder


def pytest_words(k: Optional[str] = None, slow: bool = False, tiers: Sequence[str] = ()) -> List[str]:
    """The pytest command line for ``invoke test``: every tier unless ``tiers`` names some, slow tests
    only with ``slow``.  ``tiers`` entries may be comma-separated lists."""
    chosen = {t.strip() for given in tiers for t in given.split(",") if t.strip()}
    unknown = sorted(chosen - set(TIERS))
    if unknown:
        raise Exit(f"invoke test: unknown tier {', '.join(unknown)}; the tiers are {', '.join(TIERS)}", code=2)
    words = [sys.executable, "-m", "pytest", "-q"]
    if k:
        words += ["-k", k]
    marks = []
    if chosen:
        marks.append(" or ".join(t for t in TIERS if t in chosen))
    if not slow:
        marks.append("not slow")
    if marks:
        words += ["-m", " and ".join(f"({m})" if " or " in m and len(marks) > 1 else m for m in marks)]
    return words


@task(
    iterable=["tier"],
    help={"k": "pytest -k expression", "slow": "also run tests marked slow (whole corpora)",
          "tier": f"run only this tier of tests/: {', '.join(TIERS)} (repeat it or give a comma-separated list; "
                  "default: every tier)"},
)
def test(c, k=None, slow=False, tier=None):
    """Run the test suite: every tier (unit, toolchain, vm), or the ones --tier names."""
    words = pytest_words(k, slow, tier or ())
    c.run(" ".join(shlex.quote(w) for w in words), pty=sys.stdout.isatty())


def _collection() -> Collection:
    ns = Collection(test)
    for command, parser in _subparsers(make_parser()).items():
        ns.add_task(_task(command, parser))
    return ns


ns = _collection()
