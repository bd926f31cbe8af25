"""A reader for the bmake subset of FreeBSD's ``sys/conf/kern.mk`` and of the module Makefiles.

The cross build must use the flags the target tree's own ``kern.mk`` gives a
module, not a copy of one release's: CWARNFLAGS, the arch flags and ``-std=``
change between releases.  Running bmake is not an option off FreeBSD, so
``MkReader`` evaluates the part of bmake those files use -- assignments and
conditionals -- and refuses (``MkUnsupported``) anything else it reaches,
so that a newer ``kern.mk`` is never read wrongly in silence: the caller then
falls back to known flags and records why (``generator/kmodflags.py``).

``ModuleMakefile`` splits a hand-written ``sys/modules/<m>/Makefile`` where it
includes ``bsd.kmod.mk``, because what comes before and after the include
lands at different places on the compile line.
"""

from __future__ import annotations

import fnmatch
import operator
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from ..common.errors import UserError

# Directives MkReader.read handles.  Conditionals are tracked even in branches not taken.
_CONDITIONALS = ("if", "ifdef", "ifndef", "elif", "else", "endif")
_INCLUDES = ("include", "sinclude", "-include", "dinclude")  # skipped, and listed in skipped_includes
# Directives that change nothing an assignment or condition reads; skipped.  (.undef is applied;
# .PATH is recorded, see MkReader.paths.)
_HARMLESS = ("warning", "info", "export", "export-env", "unexport", "MAKEFLAGS", "PHONY",
             "NOTMAIN", "NOPATH", "SUFFIXES", "ORDER")


class MkUnsupported(Exception):
    """kern.mk uses a construct MkReader does not evaluate; the caller falls back."""


class MkReader:
    """Evaluates the assignments and conditionals of a bmake makefile such as kern.mk.

    Enough of bmake for ``sys/conf/kern.mk`` and the module Makefiles: ``=``,
    ``+=``, ``?=``, ``:=`` (values expand lazily, as in bmake), ``.if``/
    ``.elif``/``.else``/``.endif`` with ``defined()``, ``empty()``, ``!``,
    ``&&``, ``||``, parentheses and ``== != < <= > >=`` on strings and
    numbers, and the modifiers ``:M :N :T :H :[n]``.  Target rules and their
    commands are skipped; ``.include`` is skipped (and listed).  The special
    target ``.PATH:`` (and ``.PATH.<suffix>:``) is recorded in ``paths``,
    where bmake looks for sources not in the current directory.  Anything
    else that is reached -- an unknown function or modifier, a ``.for`` or an
    ``.error`` in a taken branch -- raises ``MkUnsupported``, so that a
    newer kern.mk is never read wrongly in silence.
    """

    _ASSIGN = re.compile(r"^([A-Za-z0-9_.${}]+?)\s*([?:+!]?=)\s*(.*)$")

    def __init__(self, variables: Dict[str, str]):
        self.vars: Dict[str, str] = dict(variables)
        self.skipped_includes: List[str] = []
        self.defaulted: set = set()  # MK_* options read as "no" because nothing defined them
        # .PATH search directories, expanded, in order: "" for .PATH, ".c" for .PATH.c and so on.
        self.paths: Dict[str, List[str]] = {}

    # expansion
    def expand(self, text: str, depth: int = 0) -> str:
        if depth > 40:
            raise MkUnsupported("variable expansion recurses")
        out, i = [], 0
        while i < len(text):
            c = text[i]
            if c != "$":
                out.append(c)
                i += 1
                continue
            if text.startswith("$$", i):
                out.append("$")
                i += 2
                continue
            if i + 1 < len(text) and text[i + 1] in "({":
                j, level = i + 2, 1
                while j < len(text) and level:
                    if text[j] in "({":
                        level += 1
                    elif text[j] in ")}":
                        level -= 1
                    j += 1
                if level:
                    raise MkUnsupported(f"unbalanced variable reference in {text!r}")
                out.append(self._reference(text[i + 2 : j - 1], depth))
                i = j
                continue
            # $X: a one-letter variable (only the local ones, unused here).
            out.append(self.vars.get(text[i + 1 : i + 2], "") if i + 1 < len(text) else "")
            i += 2
        return "".join(out)

    def _reference(self, body: str, depth: int) -> str:
        parts = _split_modifiers(body)
        name = self.expand(parts[0], depth + 1)
        if name not in self.vars and name.startswith("MK_"):
            # An option src.opts.mk would define: off unless we know better.
            self.defaulted.add(name)
            value = "no"
        else:
            value = self.expand(self.vars.get(name, ""), depth + 1)
        for mod in parts[1:]:
            value = self._modify(value, self.expand(mod, depth + 1))
        return value

    @staticmethod
    def _modify(value: str, mod: str) -> str:
        words = value.split()
        if mod.startswith("M"):
            return " ".join(w for w in words if _glob(w, mod[1:]))
        if mod.startswith("N"):
            return " ".join(w for w in words if not _glob(w, mod[1:]))
        if mod == "T":
            return " ".join(w.rsplit("/", 1)[-1] for w in words)
        if mod == "H":
            return " ".join(w.rsplit("/", 1)[0] if "/" in w else "." for w in words)
        m = re.fullmatch(r"\[(-?\d+)\]", mod)
        if m:
            n = int(m.group(1))
            if n == 0:
                return value
            idx = n - 1 if n > 0 else len(words) + n
            return words[idx] if 0 <= idx < len(words) else ""
        raise MkUnsupported(f"modifier :{mod}")

    # conditionals
    def condition(self, text: str) -> bool:
        tokens = _cond_tokens(text)
        pos, value = self._or(tokens, 0)
        if pos != len(tokens):
            raise MkUnsupported(f"condition {text!r}")
        return value

    def _or(self, t: List[str], p: int) -> Tuple[int, bool]:
        return self._chain(t, p, "||", self._and, operator.or_)

    def _and(self, t: List[str], p: int) -> Tuple[int, bool]:
        return self._chain(t, p, "&&", self._not, operator.and_)

    @staticmethod
    def _chain(t: List[str], p: int, op: str, operand: Callable[[List[str], int], Tuple[int, bool]],
               combine: Callable[[bool, bool], bool]) -> Tuple[int, bool]:
        """``operand (op operand)*``.  Every operand is evaluated, not short-circuited: its tokens
        must be consumed, and an ``MK_*`` it reads is listed as defaulted either way."""
        p, v = operand(t, p)
        while p < len(t) and t[p] == op:
            p, w = operand(t, p + 1)
            v = combine(v, w)
        return p, v

    def _not(self, t: List[str], p: int) -> Tuple[int, bool]:
        if p < len(t) and t[p] == "!":
            p, v = self._not(t, p + 1)
            return p, not v
        return self._atom(t, p)

    def _atom(self, t: List[str], p: int) -> Tuple[int, bool]:
        if p >= len(t):
            raise MkUnsupported("condition ends early")
        tok = t[p]
        if tok == "(":
            p, v = self._or(t, p + 1)
            if p >= len(t) or t[p] != ")":
                raise MkUnsupported("unbalanced parentheses in condition")
            return p + 1, v
        m = re.fullmatch(r"(defined|empty|exists|target|make|commands)\((.*)\)", tok, re.S)
        if m:
            fn, arg = m.groups()
            if fn == "defined":
                return p + 1, arg in self.vars
            if fn == "empty":
                return p + 1, not self._reference(arg, 0).strip()
            if fn == "exists":
                return p + 1, os.path.exists(self.expand(arg))
            raise MkUnsupported(f"{fn}() in a condition")
        left = self._operand(tok)
        if p + 1 < len(t) and t[p + 1] in ("==", "!=", "<", "<=", ">", ">="):
            op, right = t[p + 1], self._operand(t[p + 2]) if p + 2 < len(t) else ""
            return p + 3, _compare(left, op, right)
        # A bare value: true when non-empty and not numerically zero.
        try:
            return p + 1, float(left) != 0
        except ValueError:
            return p + 1, bool(left.strip())

    def _operand(self, tok: str) -> str:
        if tok.startswith('"') and tok.endswith('"'):
            return self.expand(tok[1:-1])
        return self.expand(tok).strip()

    # statements
    def read(self, text: str) -> None:
        """Evaluate ``text``: its assignments update ``vars``."""
        stack: List[Tuple[bool, bool]] = []  # (this branch taken, some branch of this .if taken)
        for line in _logical_lines(text):
            live = all(taken for taken, _ in stack)
            d = re.match(r"^\.\s*(\w+)\s*(.*)$", line)
            if d:
                word, rest = d.group(1), d.group(2).strip()
                if word in _CONDITIONALS:
                    self._conditional(stack, word, rest, live)
                elif live:
                    self._directive(word, rest)
                continue
            if live and not line.startswith("\t") and line.strip():
                self._assign(line)
        if stack:
            raise MkUnsupported("unterminated .if")

    def _conditional(self, stack: List[Tuple[bool, bool]], word: str, rest: str, live: bool) -> None:
        """One of ``.if .ifdef .ifndef .elif .else .endif``; conditions are evaluated only where they are reached."""
        if word in ("if", "ifdef", "ifndef"):
            value = False
            if live:
                if word == "if":
                    value = self.condition(rest)
                else:
                    value = (rest in self.vars) == (word == "ifdef")
            stack.append((value, value or not live))
            return
        if not stack:
            raise MkUnsupported(f".{word} without .if")
        _, done = stack.pop()
        if word == "elif":
            outer = all(taken for taken, _ in stack)
            value = outer and not done and self.condition(rest)
            stack.append((value, done or value))
        elif word == "else":
            stack.append((not done, True))

    def _directive(self, word: str, rest: str) -> None:
        """Any other ``.word`` in a taken branch: skipped when harmless, else MkUnsupported."""
        if word in _INCLUDES:
            self.skipped_includes.append(rest)
        elif word == "PATH":
            self._path(rest)
        elif word == "undef":
            self.vars.pop(rest, None)
        elif word in _HARMLESS:
            pass
        elif word == "error":
            raise MkUnsupported(f".error {rest}")
        else:
            raise MkUnsupported(f".{word}")

    def _path(self, rest: str) -> None:
        """``.PATH: dirs`` or ``.PATH.<suffix>: dirs`` (``rest`` is what follows ``.PATH``).

        As in bmake, the line is expanded when it is read, the directories are
        appended in order, and a ``.PATH:`` with none clears the list.
        """
        m = re.fullmatch(r"(\.\w+)?\s*:\s*(.*)", rest)
        if not m:
            raise MkUnsupported(f".PATH{rest}")
        suffix, dirs = m.group(1) or "", self.expand(m.group(2)).split()
        if dirs:
            self.paths.setdefault(suffix, []).extend(dirs)
        else:
            self.paths[suffix] = []

    def search_path(self, suffix: str) -> List[str]:
        """Where bmake looks for a source ending in ``suffix`` (".c") beyond the current directory."""
        return [*self.paths.get(suffix, []), *self.paths.get("", [])]

    def _assign(self, line: str) -> None:
        """``NAME op value``; any other line is a dependency line of a target rule: not ours to run."""
        m = self._ASSIGN.match(line)
        if not m:
            return
        name, op, value = self.expand(m.group(1)), m.group(2), m.group(3)
        if op == "=":
            self.vars[name] = value
        elif op == "+=":
            self.vars[name] = f"{self.vars[name]} {value}" if self.vars.get(name) else value
        elif op == "?=":
            self.vars.setdefault(name, value)
        elif op == ":=":
            self.vars[name] = self.expand(value)
        else:
            raise MkUnsupported(f"shell assignment {name} !=")


def _split_modifiers(body: str) -> List[str]:
    """``VAR:M*:N-I*`` -> ``[VAR, M*, N-I*]``, colons inside nested references kept."""
    parts, cur, level = [], [], 0
    for c in body:
        if c in "({":
            level += 1
        elif c in ")}":
            level -= 1
        if c == ":" and level == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(c)
    parts.append("".join(cur))
    return parts


def _glob(word: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(word, pattern.replace("\\:", ":"))


def _compare(left: str, op: str, right: str) -> bool:
    try:
        a, b = float(left), float(right)
    except ValueError:
        if op in ("==", "!="):
            return (left == right) == (op == "==")
        raise MkUnsupported(f"{left!r} {op} {right!r}: not numbers")
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _cond_tokens(text: str) -> List[str]:
    """Split a condition into operands, operators and parentheses; ``${...}`` and ``fn(...)`` stay whole."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith(("&&", "||", "==", "!=", "<=", ">="), i):
            out.append(text[i : i + 2])
            i += 2
        elif c in "()!<>":
            out.append(c)
            i += 1
        elif c == '"':
            j = text.index('"', i + 1) if '"' in text[i + 1 :] else len(text)
            out.append(text[i : j + 1])
            i = j + 1
        else:
            j, level = i, 0
            while j < len(text):
                ch = text[j]
                if ch in "({":
                    level += 1
                elif ch in ")}":
                    if level == 0:
                        break
                    level -= 1
                elif level == 0 and (ch.isspace() or ch in "!=<>&|"):
                    break
                j += 1
            out.append(text[i:j])
            i = j
    return out


def _logical_lines(text: str) -> List[str]:
    """Join backslash continuations and drop comments (a ``#`` not escaped)."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = re.sub(r"(?<!\\)#.*$", "", raw) if not raw.startswith("\t") else raw
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append((cur + line).rstrip())
        cur = ""
    if cur:
        out.append(cur.rstrip())
    return out


def mk_block(text: str, name: str) -> Optional[str]:
    """The value of the first top-level ``NAME=`` assignment of a makefile (continuations joined)."""
    for line in _logical_lines(text):
        m = re.match(rf"^{re.escape(name)}\s*=\s*(.*)$", line)
        if m:
            return m.group(1).strip()
    return None


# -- the module Makefile ------------------------------------------------------------

_INCLUDE_KMOD = re.compile(r"^\.\s*include\s+<bsd\.kmod\.mk>")


@dataclass(frozen=True)
class ModuleMakefile:
    """A hand-written sys/modules/<m>/Makefile, split where it includes bsd.kmod.mk."""

    path: Path
    before: str  # read before kmod.mk's own settings
    after: str  # read after kern.mk (CFLAGS+= here lands at the end of the line)

    @classmethod
    def read(cls, path: Path) -> "ModuleMakefile":
        try:
            text = path.read_text()
        except OSError as e:
            raise UserError(f"{path}: cannot read the module Makefile: {e.strerror}") from None
        lines = text.splitlines()
        for n, line in enumerate(lines):
            if _INCLUDE_KMOD.match(line):
                return cls(path, "\n".join(lines[:n]), "\n".join(lines[n + 1 :]))
        raise UserError(f"{path}: does not include <bsd.kmod.mk>; kinstkit builds bsd.kmod.mk modules")
