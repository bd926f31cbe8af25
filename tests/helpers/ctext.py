"""Reading generated C back in tests: the bytes of a blob ``generator.common.cstring.c_blob`` wrote."""

from __future__ import annotations

import ast
import re


def c_bytes(text: str, name: str) -> bytes:
    """The bytes of the C array ``name`` that ``c_blob`` wrote (adjacent string literals of octal escapes)."""
    m = re.search(rf"^static const kc_uint8_t {name}\[(\d+)\] =\n((?:\t\".*\";?\n)+)", text, re.M)
    assert m, f"no {name} in the table"
    data = ast.literal_eval("b" + " b".join(line.strip() for line in m.group(2).splitlines()).rstrip(";"))
    assert len(data) + 1 == int(m.group(1))
    return data
