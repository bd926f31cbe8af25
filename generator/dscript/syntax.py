"""A checker for the subset of D the generated scripts are written in.

A template edit that breaks the syntax fails here, in the test suite, rather
than on a FreeBSD machine.  ``dtrace -e`` remains the real judge where
dtrace(1) exists (the tests run it there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple


class DSyntaxError(ValueError):
    """A D program the checker rejects; the message starts with the line number."""


_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r]+|\\\n)
  | (?P<nl>\n)
  | (?P<comment>/\*.*?\*/)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<pspec>[A-Za-z_$][-A-Za-z0-9_$.?*!\[\]]*(?::[-A-Za-z0-9_$.?*!\[\]]*){1,3}
              |[A-Za-z_$]*(?::[-A-Za-z0-9_$.?*!\[\]]*){1,3})
  | (?P<number>0[xX][0-9a-fA-F]+|[0-9]+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>->|==|!=|<=|>=|&&|\|\||[-+*/%<>!=@,;(){}\[\].&|^~?:])
    """,
    re.VERBOSE | re.DOTALL,
)

# Actions and aggregating functions the templates may call, with their
# argument counts (min, max; None = any).
ACTIONS: Dict[str, Tuple[int, Optional[int]]] = {
    "printf": (1, None), "printa": (1, None), "trace": (1, 1), "exit": (1, 1), "stack": (0, 1),
}
AGGREGATIONS: Dict[str, Tuple[int, int]] = {
    "count": (0, 0), "sum": (1, 1), "avg": (1, 1), "min": (1, 1), "max": (1, 1), "quantize": (1, 1),
    "lquantize": (3, 4),
}
SPECIAL_PROBES = ("BEGIN", "END", "ERROR")
# The types the templates cast to (kinst-line --print reads variables through them): D's fixed-width integers.
CAST_TYPES = frozenset(f"{u}int{n}_t" for u in ("", "u") for n in (8, 16, 32, 64)) | {"uintptr_t", "intptr_t"}
_CONVERSION = re.compile(r"%%|%[-+ #0]*(?:\d+|\*)?(?:\.\d+)?(?:@|[hlLqjzt]*[diouxXcsSpaAeEfgGkY])")


@dataclass
class _Tok:
    kind: str
    text: str
    line: int


def _tokens(text: str) -> List[_Tok]:
    """Tokens of ``text``; a leading ``#!`` line is skipped, ``#pragma D`` lines are one token."""
    out: List[_Tok] = []
    line, i = 1, 0
    if text.startswith("#!"):
        i = text.find("\n") + 1 if "\n" in text else len(text)
        line = 2
    while i < len(text):
        if text.startswith("#", i) and (i == 0 or text[i - 1] == "\n"):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            directive = text[i:end]
            if not re.fullmatch(r"#pragma D option [a-z_]+(=\S+)?\s*", directive):
                raise DSyntaxError(f"line {line}: malformed directive: {directive.strip()}")
            out.append(_Tok("pragma", directive, line))
            i = end
            continue
        m = _TOKEN.match(text, i)
        if m is None:
            raise DSyntaxError(f"line {line}: unexpected character {text[i]!r}")
        kind = m.lastgroup or ""
        if kind not in ("ws", "nl", "comment"):
            out.append(_Tok(kind, m.group(), line))
        line += m.group().count("\n")
        i = m.end()
    return out


class _Parser:
    """Recursive descent over the token list; each method consumes one construct."""

    def __init__(self, toks: List[_Tok]):
        self.toks = toks
        self.i = 0

    def peek(self, k: int = 0) -> Optional[_Tok]:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def fail(self, msg: str) -> DSyntaxError:
        tok = self.peek()
        where = f"line {tok.line}" if tok else "end of input"
        return DSyntaxError(f"{where}: {msg}")

    def take(self, text: Optional[str] = None, kind: Optional[str] = None) -> _Tok:
        tok = self.peek()
        if tok is None or (text is not None and tok.text != text) or (kind is not None and tok.kind != kind):
            want = repr(text) if text else kind
            got = repr(tok.text) if tok else "end of input"
            raise self.fail(f"expected {want}, found {got}")
        self.i += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text == text

    def program(self) -> int:
        clauses = 0
        while self.peek() is not None:
            if self.peek().kind == "pragma":
                self.i += 1
                continue
            self.clause()
            clauses += 1
        if clauses == 0:
            raise self.fail("no probe clause")
        return clauses

    def clause(self) -> None:
        self.probe_description()
        while self.at(","):
            self.take(",")
            self.probe_description()
        if self.at("/"):
            self.take("/")
            self.expr()
            self.take("/")
        self.take("{")
        while not self.at("}"):
            self.statement()
        self.take("}")

    def probe_description(self) -> None:
        tok = self.peek()
        if tok is not None and tok.kind == "ident" and tok.text in SPECIAL_PROBES:
            self.i += 1
            return
        tok = self.take(kind="pspec")
        parts = tok.text.split(":")
        if len(parts) != 4:
            raise DSyntaxError(f"line {tok.line}: probe description {tok.text!r} needs provider:module:function:name")

    def statement(self) -> None:
        if self.at("@"):
            self.aggregation()
        else:
            name = self.take(kind="ident")
            if name.text not in ACTIONS:
                raise DSyntaxError(f"line {name.line}: unknown action {name.text}()")
            args = self.call_args()
            lo, hi = ACTIONS[name.text]
            if len(args) < lo or (hi is not None and len(args) > hi):
                raise DSyntaxError(f"line {name.line}: {name.text}() takes {lo}..{hi} arguments, not {len(args)}")
            if name.text in ("printf", "printa"):
                self.format_args(name, args)
        self.take(";")

    def aggregation(self) -> None:
        self.take("@")
        if self.peek() is not None and self.peek().kind == "ident":
            self.i += 1
        if self.at("["):
            self.take("[")
            self.expr_list("]")
            self.take("]")
        self.take("=")
        func = self.take(kind="ident")
        if func.text not in AGGREGATIONS:
            raise DSyntaxError(f"line {func.line}: {func.text}() is not an aggregating function")
        args = self.call_args()
        lo, hi = AGGREGATIONS[func.text]
        if not lo <= len(args) <= hi:
            raise DSyntaxError(f"line {func.line}: {func.text}() takes {lo}..{hi} arguments, not {len(args)}")

    def format_args(self, name: _Tok, args: List[List[_Tok]]) -> None:
        """printf: conversions match the arguments; printa: a format and aggregations."""
        first = args[0]
        if len(first) != 1 or first[0].kind != "string":
            if name.text == "printa" and first and first[0].text == "@":
                return
            raise DSyntaxError(f"line {name.line}: {name.text}() needs a format string first")
        convs = [c for c in _CONVERSION.findall(first[0].text) if c != "%%"]
        if name.text == "printf":
            if len(convs) != len(args) - 1:
                raise DSyntaxError(
                    f"line {name.line}: printf format has {len(convs)} conversions for {len(args) - 1} arguments"
                )
            return
        aggs = [a for a in args[1:] if a and a[0].text == "@"]
        if len(aggs) != len(args) - 1 or not aggs:
            raise DSyntaxError(f"line {name.line}: printa() takes a format and aggregations only")
        if sum(1 for c in convs if c.endswith("@")) != len(aggs):
            raise DSyntaxError(f"line {name.line}: printa format needs one %@ conversion per aggregation")

    def call_args(self) -> List[List[_Tok]]:
        self.take("(")
        args = [] if self.at(")") else self.expr_list(")")
        self.take(")")
        return args

    def expr_list(self, close: str) -> List[List[_Tok]]:
        out = [self.expr()]
        while self.at(","):
            self.take(",")
            out.append(self.expr())
        return out

    _BINARY = ("==", "!=", "<", ">", "<=", ">=", "&&", "||", "+", "-", "*", "%", "&", "|", "^")

    def expr(self) -> List[_Tok]:
        start = self.i
        self.unary()
        while self.peek() is not None and self.peek().text in self._BINARY:
            self.i += 1
            self.unary()
        return self.toks[start : self.i]

    def unary(self) -> None:
        while True:
            tok = self.peek()
            if tok is not None and tok.text in ("!", "-", "~", "*", "&"):
                self.i += 1
            elif self.cast():
                continue
            else:
                break
        self.primary()
        while True:
            if self.at("["):
                self.take("[")
                self.expr_list("]")
                self.take("]")
            elif self.at("->") or self.at("."):
                self.i += 1
                self.take(kind="ident")
            else:
                return

    def cast(self) -> bool:
        """``(TYPE)`` or ``(TYPE *)`` with one of CAST_TYPES: consume it and return True."""
        tok, name = self.peek(), self.peek(1)
        if tok is None or tok.text != "(" or name is None or name.text not in CAST_TYPES:
            return False
        self.i += 2
        while self.at("*"):
            self.take("*")
        self.take(")")
        return True

    def primary(self) -> None:
        tok = self.peek()
        if tok is None:
            raise self.fail("expected an expression")
        if tok.kind in ("number", "string"):
            self.i += 1
        elif tok.text == "@":
            self.i += 1
            if self.peek() is not None and self.peek().kind == "ident":
                self.i += 1
        elif tok.kind == "ident":
            self.i += 1
            if self.at("("):
                self.call_args()
        elif tok.text == "(":
            self.take("(")
            self.expr()
            self.take(")")
        else:
            raise self.fail(f"expected an expression, found {tok.text!r}")


def check(text: str) -> int:
    """Parse ``text`` as D; return the number of probe clauses or raise DSyntaxError."""
    return _Parser(_tokens(text)).program()


def check_files(paths: Sequence[str]) -> List[str]:
    """``path: error`` for each file that does not parse (for ad-hoc use)."""
    out = []
    for p in paths:
        try:
            check(Path(p).read_text())
        except DSyntaxError as e:
            out.append(f"{p}: {e}")
    return out
