"""The serial console, as the runner reads it: log it, find the hook's markers, spot a panic.

``ConsoleWatcher.feed()`` takes raw bytes as they arrive, appends them to the
console log unchanged, and returns what they told: the hook started (the boot
is over), the script exited, the results were written, or the kernel
panicked.  It is pure apart from the log file, so the tests drive it with
canned transcripts.

Panic lines are data in ``PANIC_PATTERNS``: ``panic:`` (FreeBSD),
``Kernel panic`` (Linux) and the debugger's ``KDB:`` lines.  ``KDB:`` alone
would also match two lines every FreeBSD GENERIC kernel prints at boot
("KDB: debugger backends: ddb", "KDB: current backend: ddb"), so only the
debugger's entry and backtrace lines count (``BENIGN``).  Patterns are anchored at the start of a line
(after a Linux printk timestamp), and the hooks prefix every line of the
guest script's output with "| ", so a check that prints "panic:" cannot end
the run.

``responders`` answer prompts that do not end in a newline (a login prompt):
each is (pattern, reply) and fires once, in order.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, List, Optional, Sequence, Tuple

MARKER = "@@kinstkit"
_TIMESTAMP = re.compile(r"^\[\s*\d+\.\d+\]\s?")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1bc")

PANIC_PATTERNS: Tuple[Tuple[str, "re.Pattern[str]"], ...] = (
    ("freebsd-panic", re.compile(r"^panic: ")),  # panic(9): "panic: <message>"
    ("linux-panic", re.compile(r"^Kernel panic - not syncing")),  # Linux panic()
    ("freebsd-kdb", re.compile(r"^KDB: (enter|stack backtrace)")),  # kdb_enter(), the backtrace that follows
)
PANIC_CONTEXT = 40  # console lines kept from the first panic line on
# Informational lines that share a prefix with a panic pattern.
BENIGN = (re.compile(r"^KDB: (debugger backends|current backend)"),)


@dataclass
class Event:
    """Something the console told, at ``at`` (monotonic seconds)."""

    kind: str  # hook-start, script-exit, results-written, no-meta-disk, meta-unreadable, panic, ...
    at: float
    detail: str = ""


def panic_kind(line: str) -> Optional[str]:
    """The panic pattern a console line matches, or None."""
    text = _TIMESTAMP.sub("", _ANSI.sub("", line)).rstrip("\r\n")
    if any(b.match(text) for b in BENIGN):
        return None
    for kind, rx in PANIC_PATTERNS:
        if rx.match(text):
            return kind
    return None


@dataclass
class ConsoleWatcher:
    log: Optional[BinaryIO] = None  # the console log; written unchanged
    responders: Sequence[Tuple["re.Pattern[str]", bytes]] = ()
    clock: Callable[[], float] = time.monotonic
    events: List[Event] = field(default_factory=list)
    _partial: str = ""
    _tail: List[str] = field(default_factory=list)
    _next_responder: int = 0
    panic_context: List[str] = field(default_factory=list)  # the first panic line and what follows it

    def feed(self, data: bytes) -> Tuple[List[Event], List[bytes]]:
        """Take console bytes; return the new events and any replies to send."""
        if self.log is not None:
            self.log.write(data)
            self.log.flush()
        now = self.clock()
        new: List[Event] = []
        text = self._partial + data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self._partial = lines.pop()
        for raw in lines:
            line = _ANSI.sub("", raw).rstrip("\r")
            self._remember(line)
            ev = self._line_event(line, now)
            if self.panic_context or (ev is not None and ev.kind == "panic"):
                if len(self.panic_context) < PANIC_CONTEXT:
                    self.panic_context.append(line)
            if ev:
                new.append(ev)
        replies = self._respond()
        self.events.extend(new)
        return new, replies

    def _line_event(self, line: str, now: float) -> Optional[Event]:
        kind = panic_kind(line)
        if kind:
            return Event("panic", now, line.strip())
        text = _TIMESTAMP.sub("", line).strip()
        if text.startswith(MARKER + " "):
            word, _, rest = text[len(MARKER) + 1 :].partition(" ")
            return Event(word, now, rest)
        return None

    def _respond(self) -> List[bytes]:
        replies = []
        while self._next_responder < len(self.responders):
            rx, reply = self.responders[self._next_responder]
            if not rx.search(_ANSI.sub("", self._partial)):
                break
            replies.append(reply)
            self._partial = ""  # answered: the prompt must not match again
            self._next_responder += 1
        return replies

    def _remember(self, line: str) -> None:
        self._tail.append(line)
        if len(self._tail) > 400:
            del self._tail[:200]

    def tail(self, n: int = 30) -> List[str]:
        lines = self._tail + ([self._partial] if self._partial else [])
        return lines[-n:]

    def first(self, kind: str) -> Optional[Event]:
        for ev in self.events:
            if ev.kind == kind:
                return ev
        return None
