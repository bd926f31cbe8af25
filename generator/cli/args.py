"""Argument types and option groups more than one command uses."""

from __future__ import annotations

import argparse

from ..common.defaults import DEFAULT_FUNCTION, DEFAULT_PROLOGUE_RULE, PROLOGUE_RULE_HELP, PROLOGUE_RULES

KERNEL_HELP = "ELF image: kernel, .ko or shared object (default: the embedded sample kernel)"


def offset(text: str) -> int:
    """A byte offset, decimal or 0x-hex."""
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"offset '{text}' is not a number")


def add_kernel(p: argparse.ArgumentParser, helptext: str = KERNEL_HELP) -> None:
    p.add_argument("--kernel", help=helptext)


def add_prologue_rule(p, default: str = DEFAULT_PROLOGUE_RULE, extra=()) -> None:
    """``--prologue-rule``; ``extra`` adds planning-only rules (the linux guest's 'none')."""
    more = "".join(f", '{r}': no prologue rule" for r in extra)
    p.add_argument(
        "--prologue-rule",
        choices=PROLOGUE_RULES + tuple(extra),
        default=default,
        help=(PROLOGUE_RULE_HELP + more).replace("%", "%%")
        + (f"; here the default is '{default}'" if default != DEFAULT_PROLOGUE_RULE else ""),
    )


FUNCTION_HELP = f"function name, name@file or 0xADDRESS (default: {DEFAULT_FUNCTION})"
