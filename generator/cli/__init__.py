"""Command line: ``python -m generator <command> ...``, the only code that parses argv.

One command with sane defaults: with no ``--kernel`` every command works on the
embedded sample kernel (built from ``samples/kernel/`` on first use), so a
newcomer sees real output at once.  Errors are one line on stderr and a
nonzero exit; there is no traceback for bad input.

Each module of this package adds its commands with ``add_parsers(sub)`` and
turns parsed arguments into calls of the pipeline's stages.  The heavy
imports (capstone, iced-x86, jinja2, pyelftools) happen inside the handlers,
so that ``--help`` and the commands that need none of them start quickly.
``tasks.py`` builds the invoke tasks from ``make_parser()``, so the two can
never disagree on a flag.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from generator.cli import bench, build, dtmalloc, generate, harness, probes, sample, verify, vm
from generator.common.errors import ClassifierError, UserError

EXIT_USER = 2
EXIT_BUG = 3

# In the order `--help` lists them: analysis, generation, proof, build, VM, tools.
COMMAND_MODULES = (probes, generate, dtmalloc, harness, vm, build, verify, sample, bench)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m generator", description="Ahead-of-time kinst/dtmalloc tooling.")
    sub = p.add_subparsers(dest="command", required=True)
    for mod in COMMAND_MODULES:
        mod.add_parsers(sub)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.run(args)
    except UserError as e:
        sys.stderr.write(f"error: {e}\n")
        return EXIT_USER
    except ClassifierError as e:
        sys.stderr.write(f"internal error (please report): {e}\n")
        return EXIT_BUG
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
