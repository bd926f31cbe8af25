"""Bad DWARF, made on purpose: mutated copies of a real ``-g`` image, and a driver that runs the DWARF
commands on each in one process and reports how each ended.

Mutation kinds (``mutants``), each a copy of the image with one change:

- ``flip-<section>``: a few random bytes of one debug section replaced by random values;
- ``truncate-<section>``: the section header's size cut to a random point (the section ends early);
- ``loclist-past-end``: every ``DW_AT_location`` that is a list offset (``.debug_loc``/``.debug_loclists``)
  points past the end of its section;
- ``unknown-op``: every expression ``DW_AT_location`` starts with an operation no DWARF version defines;
- ``type-cycle``: every typedef, pointer and qualifier type is its own ``DW_AT_type``;
- ``die-ref-loop``: every ``DW_AT_abstract_origin`` and ``DW_AT_specification`` names its own DIE.

The structured kinds find the attributes with pyelftools (not with kinstkit's reader, which is what is
checked).  ``run_all`` runs the commands in a child process with a cache of its own (a mutated copy must not
leave entries in the user's cache) and an alarm per command: an answer, or one ``error:`` line and exit
2, is fine; a Python exception leaving ``main``, more than one stderr line on exit 2, or a command still
running after ``limit`` seconds is not.
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, NamedTuple, Sequence, Tuple

from helpers.paths import REPO

DEBUG_SECTIONS = (".debug_info", ".debug_abbrev", ".debug_line", ".debug_loc", ".debug_loclists", ".debug_ranges",
                  ".debug_rnglists", ".debug_str", ".debug_line_str", ".debug_aranges", ".debug_addr")
UNDEFINED_OP = 0x02  # reserved since DWARF 2, defined by no version or vendor
_TYPE_TAGS = ("DW_TAG_typedef", "DW_TAG_pointer_type", "DW_TAG_const_type", "DW_TAG_volatile_type")
_REF_FORMS = {"DW_FORM_ref4": 4}


class Mutant(NamedTuple):
    kind: str  # the mutation kind (module docstring)
    path: Path  # the mutated copy
    changes: int  # bytes or attributes changed


class Outcome(NamedTuple):
    kind: str
    argv: List[str]
    rc: int  # the command's exit status; -1: an exception left main; -2: still running at the limit
    stderr: str  # the last stderr lines, or the exception's traceback


def _sections(path: Path) -> Dict[str, Tuple[int, int, int]]:
    """name -> (file offset, size, file offset of the section header's sh_size)."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        shoff, entsize = elf["e_shoff"], elf["e_shentsize"]
        out = {}
        for i, s in enumerate(elf.iter_sections()):
            if s.name in DEBUG_SECTIONS and s["sh_size"]:
                out[s.name] = (s["sh_offset"], s["sh_size"], shoff + i * entsize + 32)  # ELF64: sh_size at +32
        return out


def _attribute_patches(path: Path) -> Dict[str, List[Tuple[int, bytes]]]:
    """Per structured kind, (file offset, new bytes) of every attribute value it changes."""
    from elftools.elf.elffile import ELFFile

    sections = _sections(path)
    info_at = sections[".debug_info"][0]
    loc_name = ".debug_loclists" if ".debug_loclists" in sections else ".debug_loc"
    loc_size = sections.get(loc_name, (0, 0, 0))[1]
    out: Dict[str, List[Tuple[int, bytes]]] = {"loclist-past-end": [], "unknown-op": [], "type-cycle": [],
                                               "die-ref-loop": []}
    with open(path, "rb") as f:
        dwarf = ELFFile(f).get_dwarf_info()
        for cu in dwarf.iter_CUs():
            for die in cu.iter_DIEs():
                for name, attr in die.attributes.items():
                    at = info_at + attr.offset
                    own = struct.pack("<I", die.offset - cu.cu_offset)
                    if name == "DW_AT_location" and attr.form in ("DW_FORM_sec_offset", "DW_FORM_data4"):
                        out["loclist-past-end"].append((at, struct.pack("<I", loc_size + 16)))
                    elif name == "DW_AT_location" and attr.form == "DW_FORM_exprloc" and attr.value:
                        out["unknown-op"].append((at + _uleb_len(len(attr.value)), bytes([UNDEFINED_OP])))
                    elif name == "DW_AT_type" and die.tag in _TYPE_TAGS and attr.form in _REF_FORMS:
                        out["type-cycle"].append((at, own))
                    elif name in ("DW_AT_abstract_origin", "DW_AT_specification") and attr.form in _REF_FORMS:
                        out["die-ref-loop"].append((at, own))
    return out


def _uleb_len(n: int) -> int:
    k = 1
    while n >= 0x80:
        n >>= 7
        k += 1
    return k


def mutants(image: Path, out_dir: Path, seed: int, flips: int, truncations: int) -> List[Mutant]:
    """The structured mutants of ``image``, ``flips`` random-flip copies and ``truncations`` truncated copies."""
    rng = random.Random(seed)
    data = image.read_bytes()
    sections = _sections(image)
    made: List[Mutant] = []

    def write(kind: str, patches: Sequence[Tuple[int, bytes]]) -> None:
        buf = bytearray(data)
        for at, new in patches:
            buf[at:at + len(new)] = new
        path = out_dir / f"{len(made):03d}-{kind}"
        path.write_bytes(bytes(buf))
        made.append(Mutant(kind, path, len(patches)))

    for kind, patches in _attribute_patches(image).items():
        if patches:
            write(kind, patches)
    names = sorted(sections)
    for _ in range(flips):
        name = rng.choice(names)
        at, size, _ = sections[name]
        write(f"flip-{name[1:]}", [(at + rng.randrange(size), bytes([rng.randrange(1, 256)]))
                                   for _ in range(rng.randint(1, 8))])
    for _ in range(truncations):
        name = rng.choice(names)
        _, size, size_field = sections[name]
        write(f"truncate-{name[1:]}", [(size_field, struct.pack("<Q", rng.randrange(size)))])
    return made


_DRIVER = r"""
import contextlib, io, json, signal, sys, traceback
from generator.cli import main

jobs, limit, out = json.loads(sys.argv[1]), int(sys.argv[2]), open(sys.argv[3], "w")

class Late(BaseException):
    pass

def late(*_):
    raise Late()

signal.signal(signal.SIGALRM, late)
for kind, argv in jobs:
    err = io.StringIO()
    signal.alarm(limit)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 2
        text = err.getvalue()
    except Late:
        rc, text = -2, "still running"
    except BaseException:
        rc, text = -1, traceback.format_exc()
    finally:
        signal.alarm(0)
    out.write(json.dumps([kind, argv, rc, text[-3000:]]) + "\n")
    out.flush()
"""


def run_all(jobs: Sequence[Tuple[str, List[str]]], limit: int = 30) -> List[Outcome]:
    """Run each (kind, argv) of ``python -m generator`` in one child process with a fresh cache."""
    with tempfile.TemporaryDirectory(prefix="kinstkit-fuzz-") as tmp:
        result = Path(tmp) / "outcomes.jsonl"
        env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "CI": "1", "KINSTKIT_CACHE": str(Path(tmp) / "cache"),
               "HOME": str(Path.home())}
        subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(list(jobs)), str(limit), str(result)], cwd=REPO,
                       env=env, timeout=limit * len(jobs) + 120, check=False)
        return [Outcome(*json.loads(line)) for line in result.read_text().splitlines()]


def bad(outcomes: Sequence[Outcome]) -> List[str]:
    """The outcomes that break the rule: a traceback, a hang, or exit 2 without exactly one ``error:`` line."""
    out = []
    for o in outcomes:
        lines = o.stderr.strip().splitlines()
        if o.rc in (-1, -2):
            out.append(f"{o.kind} {' '.join(o.argv)}: {'traceback' if o.rc == -1 else 'hang'}: {o.stderr[-600:]}")
        elif o.rc not in (0, 2):
            out.append(f"{o.kind} {' '.join(o.argv)}: exit {o.rc}: {o.stderr[-300:]}")
        elif o.rc == 2 and (len(lines) != 1 or not lines[0].startswith("error: ")):
            out.append(f"{o.kind} {' '.join(o.argv)}: exit 2 with {len(lines)} lines: {o.stderr[-300:]}")
    return out
