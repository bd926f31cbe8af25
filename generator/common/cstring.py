"""The one escaper for strings emitted into C.

Every string a generated C file holds -- function and file names, reasons,
malloc-type descriptions, paths -- goes through ``c_string``, which the
template environment offers as the ``c_string`` filter.  Names come from ELF
symbol tables and descriptions from kernel data: any byte may occur.
"""

from __future__ import annotations

import re
from typing import List, Union


def _escape(raw: bytes) -> str:
    out: List[str] = []
    for b in raw:
        ch = chr(b)
        if ch in '"\\?':  # '?': no trigraph can form
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")  # octal, never hex: a hex escape would swallow following hex digits
    return "".join(out)


def c_string(text: Union[str, bytes], width: int = 0) -> str:
    """A C string literal holding ``text`` exactly (UTF-8 for ``str``), quotes included.

    With ``width``, long text becomes adjacent literals of about that many
    characters, broken after spaces, one per continuation line (style(9)).
    """
    if isinstance(text, bytes):
        return f'"{_escape(text)}"'
    if not width:
        return f'"{_escape(text.encode("utf-8"))}"'
    pieces, cur = [], ""
    for word in re.findall(r"\S+\s*|\s+", text):
        w = _escape(word.encode("utf-8"))
        if cur and len(cur) + len(w) > width:
            pieces.append(cur)
            cur = ""
        cur += w
    pieces.append(cur)
    return "\n\t    ".join(f'"{p}"' for p in pieces)


def c_bytes(b: bytes) -> str:
    """``{ 0x55, 0x48 }``: a byte string as a C initializer."""
    return "{ " + ", ".join(f"{x:#04x}" for x in b) + " }"


def c_comment(text: str) -> str:
    """``text`` made safe inside a C block comment: a ``*/`` in it would end the comment early."""
    return text.replace("*/", "*\\/")


def _blob_escapes() -> List[str]:
    out = []
    for b in range(256):
        ch = chr(b)
        out.append(ch if 0x20 <= b < 0x7F and ch not in '"\\?' else f"\\{b:03o}")
    return out


_BLOB = _blob_escapes()


def c_blob(data: bytes, per_line: int = 18, indent: str = "\n\t") -> str:
    """``data`` as adjacent C string literals, ``per_line`` bytes each: how a table's blobs are emitted.

    Compilers read a long string literal far faster than one initializer
    per byte.  Every escape is a three-digit octal one, so a digit after it
    can never join it.
    """
    if not data:
        return '""'
    esc = _BLOB
    lines = ['"' + "".join([esc[b] for b in data[i : i + per_line]]) + '"' for i in range(0, len(data), per_line)]
    return indent.join(lines)
