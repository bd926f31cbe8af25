"""Lua 5.4 from Debian's source built for this machine with ``-g``: the real code whose variables the harness
reads at probe sites and gdb prints at the same hits.

``liblua5.4.so`` (the core and standard libraries) and the ``lua``
interpreter linked against it, by the host's gcc with ``-O2`` or ``-O0``,
frame pointers everywhere (kinst probes functions with a frame-pointer
prologue), a fixed string-hash seed (``cross.lua`` says why), cached under
``<cache>/corpus/`` by a key over the compiler, the flags and the sources.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict

from helpers.cross import LUA_LIB, _build, _key, lua_source
from helpers.paths import CORPUS_CACHE
from helpers.skips import missing

FLAGS = ("-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-stack-protector",
         "-fcf-protection=none", "-std=gnu99", "-DLUA_COMPAT_5_3", "-DLUA_USE_LINUX",
         "-Dluai_makeseed(L)=0x2545f491u")


def lua_native(opt: str) -> Dict[str, Path]:
    """liblua5.4.so and lua built with ``opt`` (``-O2``, ``-O0``) and -g; skip when gcc is missing."""
    __tracebackhide__ = True
    gcc = shutil.which("gcc")
    if gcc is None:
        missing("gcc not installed (apt-get install gcc): Lua is built with it for the value proof")
    src = lua_source() / "src"
    flags = [opt, *FLAGS]
    out = CORPUS_CACHE / f"lua5.4-native{opt}-{_key(gcc, *flags, *sorted(src.glob('*.[ch]')))}"
    objs = [f"{n}.o" for n in LUA_LIB]
    cmds = [[gcc, *flags, "-fPIC", "-c", str(src / f"{n}.c"), "-o", f"{n}.o"] for n in LUA_LIB]
    cmds += [[gcc, "-shared", "-o", "liblua5.4.so", *objs, "-lm"],
             [gcc, *flags, "-o", "lua", str(src / "lua.c"), "-L.", "-llua5.4", "-lm", f"-Wl,-rpath,{out}"]]
    _build(out, cmds, f"Lua 5.4 {opt} -g for this machine")
    return {"lib": out / "liblua5.4.so", "lua": out / "lua"}
