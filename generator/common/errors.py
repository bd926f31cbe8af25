"""Error types shared by every stage.

A ``UserError`` is a problem with what the user handed us (a file, a name, an
offset) or with the environment (a missing tool).  The command line prints its
message as one line on stderr and exits nonzero, with no traceback.  Anything
else that escapes is a bug in kinstkit and keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input or environment, reported as one line."""


class ClassifierError(Exception):
    """The classifier and the decoder of record disagree: a kinstkit bug.

    Raised instead of guessing, so that no probe is ever emitted from data the
    tooling could not cross-check.
    """
