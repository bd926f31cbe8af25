"""Defaults the user sees, each defined once.

The command line, the invoke tasks, the build request and the docs all name
these; a default that changes here changes everywhere.
"""

from __future__ import annotations

# The function `probes`, `generate` and `build` look at when none is named:
# dtrace_kinst(4)'s example, and a function the sample kernel has.
DEFAULT_FUNCTION = "vm_fault"

DEFAULT_PROVIDER = "kinst"

# kinst's frame-pointer rule: 'any' instruction is push %rbp (newest kinst),
# or the 'first' byte is 0x55 (FreeBSD 14.0).
PROLOGUE_RULES = ("any", "first")
DEFAULT_PROLOGUE_RULE = "any"
PROLOGUE_RULE_HELP = ("kinst's frame-pointer rule: 'any' instruction is push %rbp (newest kinst, the default) or "
                      "the 'first' one is (FreeBSD 14.0)")

# The FreeBSD release the messages and examples point at.
EXAMPLE_RELEASE = "14.3-RELEASE"

# Seconds a harness run (plain, probed or under callgrind) may take before it is killed.
RUN_TIMEOUT = 600.0
