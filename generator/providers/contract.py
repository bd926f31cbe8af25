"""The contract every provider implements: one ``Provider`` record per ``providers/<name>/``.

FreeBSD keeps each DTrace provider in one module directory; here each is one
package of ``generator/providers/`` that exports ``PROVIDER``, and one line
in ``generator/providers/__init__.py``'s ``PROVIDERS`` lists it.  The build
stage, ``generate``, ``build`` and ``load`` loop over the registry and never
branch on a provider's name: what differs between providers is in the
record.

The record is light to import: its callables import the provider's heavy
modules (analysis, discovery, jinja2) when they are called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, NamedTuple, Optional, Tuple

if TYPE_CHECKING:  # the record names the image type; importing it here would load the ELF reader
    import argparse

    from ..image.elf import KernelImage


class Selection(NamedTuple):
    """What the user asked the providers for on the command line; each provider reads its own fields."""

    functions: Tuple[str, ...] = ()  # kinst: functions to table ((): the default function)
    all_functions: bool = False  # kinst: every eligible function
    prologue_rule: str = ""  # kinst: kinst's frame-pointer rule ("": the default)
    jump: bool = False  # kinst: the table carries the jump proof (analysis/jumpplan.py)
    malloc_modules: Tuple[str, ...] = ()  # dtmalloc: .ko files whose malloc types to include


class Generated(NamedTuple):
    """What a provider's ``generate`` wrote."""

    paths: Tuple[Path, ...]  # the files rendered, in the order written
    summary: str  # one line for the user ("147 probes in 1 function, 0 refused"); "" for none


class ProviderOption(NamedTuple):
    """One command-line option of a provider, on ``generate`` and ``build``."""

    flag: str  # "--function"
    dest: str  # the Selection field it fills
    help: str
    kind: str  # "append" (repeatable value), "flag" (store_true) or "value"
    group: str = ""  # options with the same non-empty group exclude each other
    choices: Tuple[str, ...] = ()  # for "value": the accepted values
    build_flag: str = ""  # its name on ``build``, where ``flag`` would read like another option ("": flag)
    metavar: str = ""  # how the help names its value ("": argparse's default)


class Provider(NamedTuple):
    """One provider module kinstkit generates and builds (see the module docstring)."""

    name: str  # the module's name: <name>.ko, sys/modules/<name>/, templates/<name>/
    plain: Callable[[], Tuple[str, ...]]  # hand-written sources in sys/modules/<name>/ (ISA folders included)
    # target ISA -> what compiles anywhere without kernel headers (core, table, target data), and the
    # directories of the module its headers are in
    portable: Callable[[str], Tuple[str, ...]]
    includes: Callable[[str], Tuple[str, ...]]
    table: str  # the generated file whose header names the kernel it was made from
    options: Tuple[ProviderOption, ...]  # its options of generate and build
    # (kernel image, selection, output directory or None for sys/modules/<name>/) -> what was written
    generate: Callable[["KernelImage", Selection, Optional[Path]], Generated]
    # What its generated sources depend on beyond the kernel's bytes and kinstkit's own code (a stamp key's part)
    stamp: Callable[[Selection], Dict[str, object]]

    def __repr__(self) -> str:
        return f"Provider({self.name})"


def add_options(parser: "argparse.ArgumentParser", providers: Tuple[Provider, ...], command: str) -> None:
    """Every provider's options on ``command``'s ``parser``, each help prefixed with the provider's name."""
    groups: Dict[str, "argparse._MutuallyExclusiveGroup"] = {}
    for p in providers:
        for o in p.options:
            target = parser
            if o.group:
                if o.group not in groups:
                    groups[o.group] = parser.add_mutually_exclusive_group()
                target = groups[o.group]
            text = f"{p.name}: {o.help}".replace("%", "%%")  # argparse formats help with %
            flag = o.build_flag if command == "build" and o.build_flag else o.flag
            value = {"metavar": o.metavar} if o.metavar else {}
            if o.kind == "append":
                target.add_argument(flag, dest=o.dest, action="append", default=[], help=text, **value)
            elif o.kind == "flag":
                target.add_argument(flag, dest=o.dest, action="store_true", help=text)
            else:
                target.add_argument(flag, dest=o.dest, choices=o.choices or None, help=text, **value)


def selection(args: "argparse.Namespace") -> Selection:
    """The Selection the parsed options of ``add_options`` spell."""
    given = vars(args)
    return Selection(**{f: (tuple(given[f]) if isinstance(given.get(f), list) else given[f])
                        for f in Selection._fields if given.get(f) is not None})


def options_given(provider: Provider, sel: Selection, command: str, others: Tuple[Provider, ...] = ()) -> List[str]:
    """"``--flag`` is a ``provider`` option" for each of its options that ``sel`` sets (and ``others`` lack):
    what a command that does not run ``provider`` refuses."""
    empty = Selection()
    theirs = {o.dest for p in others for o in p.options}
    return [f"{o.build_flag if command == 'build' and o.build_flag else o.flag} is a {provider.name} option"
            for o in provider.options if o.dest not in theirs and getattr(sel, o.dest) != getattr(empty, o.dest)]
