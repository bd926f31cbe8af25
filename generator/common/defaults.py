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
# No prologue rule at all: for a kernel whose own annotations mark the code a
# breakpoint must not touch (the Linux guest of vm-test: .entry.text, noinstr,
# the kprobe blacklist), where kinst's heuristic for "possibly an exception
# handler" only refuses ordinary functions built without frame pointers.
# Planning only (the capstone path, make_plan(fast=False)): the accelerated
# whole-image summaries know the two kinst rules above.
PROLOGUE_NONE = "none"

# The FreeBSD release the messages and examples point at.
EXAMPLE_RELEASE = "14.3-RELEASE"

# Seconds a harness run (plain, probed or under callgrind) may take before it is killed.
RUN_TIMEOUT = 600.0
