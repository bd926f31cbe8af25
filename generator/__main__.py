"""``python -m generator`` in a checkout, the ``kinstkit`` command when installed: see ``cli/__init__.py``."""

import atexit
import os
import sys

from .cli import main


def _leave(code: int) -> None:
    """Exit with ``code`` once the output is flushed and the exit handlers have run, without tearing the
    interpreter down.

    Tearing down frees every module and object one by one: 10 ms here, a
    tenth of ``probes --all --summary`` on a small library, for memory the
    process gives back at once by ending.  The handlers (multiprocessing's,
    temporary files') still run; where this Python has no way to run them,
    the exit is the ordinary one.
    """
    run_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_handlers is None:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # the reader stopped reading (main() closed stderr then)
            pass
    run_handlers()
    os._exit(code)


def run() -> None:
    """The ``kinstkit`` console script."""
    _leave(main())


if __name__ == "__main__":
    run()
