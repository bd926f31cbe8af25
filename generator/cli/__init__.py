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
import importlib
import sys
from typing import Optional, Sequence

from ..common.errors import ClassifierError, UserError

EXIT_USER = 2
EXIT_BUG = 3

# Each command and the module of this package that defines it, in the order
# ``--help`` lists them: analysis, generation, proof, VM, build, tools.
# tests/unit/test_tasks.py holds it equal to what the modules define.
COMMANDS = {
    "probes": "probes",
    "generate": "generate",
    "malloc-types": "dtmalloc",
    "dscript": "dtmalloc",
    "harness": "harness",
    "vm-test": "vm",
    "vm-shell": "vm",
    "vm-image": "vm",
    "build": "build",
    "fetch-release": "build",
    "check-ko": "build",
    "load": "build",
    "unload": "build",
    "ci-config": "build",
    "verify-decoder": "verify",
    "sample": "sample",
    "bench": "bench",
}


def make_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The whole command line; or, given a known ``command``, only the parsers of the module that defines it.

    Importing every command's module and building every parser took 20 ms,
    a fifth of ``probes --all --summary`` on a small library: a command
    line builds only what it runs.  ``--help``, an unknown command and
    ``tasks.py`` get everything.
    """
    p = argparse.ArgumentParser(prog="python -m generator", description="Ahead-of-time kinst/dtmalloc tooling.")
    sub = p.add_subparsers(dest="command", required=True)
    names = [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for name in names:
        importlib.import_module(f".{name}", __name__).add_parsers(sub)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = make_parser(argv[0] if argv else None).parse_args(argv)
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
