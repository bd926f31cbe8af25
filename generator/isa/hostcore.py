"""The portable core of an ISA, built for this host: the one implementation of kinst's per-instruction rule.

``sys/modules/kinst/<arch>/kinst_core.c`` decides, from an instruction's
bytes, kinst's probe metadata and whether the instruction can be probed at
all (``kinst_core_dissect()``).  The kernel module runs it when a probe is
made; the analysis runs the same file, compiled here into one shared
library with the ISA's step (``Isa.accelerator.walk_c``: where an
instruction ends, capstone's text, the checks that need that text, the
prologue rule) and the generic walk (``isa/accel/kk_host.c``), which turns
a function into one row per instruction and makes summaries, table rows and
JSON records of them.

The library is compiled on first use into the cache, keyed by the content
of everything that goes into it (``common.ccache``); its C headers are
rendered from templates (``kinst_encoding.h``, as ``generate`` renders it).
What the C prints or looks up (reason texts, mnemonics refused by name,
kind names, the JSON record's fields) is handed to it from Python data
(``kk_init()``); the row layout comes back from C (``kk_layout()``), so it
has one owner.  A C compiler and capstone's headers (the wheel ships them)
are required: without them the analysis stops with one line saying so.
"""

import ctypes
import functools
import os
import shutil
import struct
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, Optional

from ..common.defaults import PROLOGUE_NONE
from ..common.errors import ClassifierError, UserError
from ..common.paths import CACHE, SYS_MODULES, TEMPLATE_DIR
from . import encoding
from .contract import BAD, KIND_SKIP, STATUS_OK, STATUS_SKIP, Insn, Isa, Verdict

ENCODING_TEMPLATE = "kinst_encoding.h.j2"
FIELDS_TEMPLATE = "kk_fields.h.j2"
GENERIC_DIR = Path(__file__).resolve().parent / "accel"  # kk_host.c, kk_host.h
CACHE_DIR = CACHE / "host"
LIB_NAME = "kk.so"

# What a walk or one classification says (kk_host.h).
NEXT, DEFER, ERROR = 0, 1, 2
TEXT_NONE, TEXT_REFUSED, TEXT_ALL = 0, 1, 2
ROW_TARGET = 0x01  # KK_R_TARGET (kk_host.h): a row's kr_target holds a direct branch's target


def render_encoding(isa: Isa, out_dir: Path) -> Path:
    """``kinst_encoding.h`` for ``isa`` in ``out_dir``, as ``generate`` renders it for a table."""
    from ..render import render_tree

    (path,) = render_tree("kinst", out_dir, encoding.context(isa), [], f"kinstkit's host build of the {isa.name} core",
                          only=(ENCODING_TEMPLATE,))
    return path


def md_fields(isa: Isa) -> list[dict[str, Any]]:
    """The fields of the core's ``struct kinst_md`` Python reads from a row: the table kind, then the
    ``Accelerator.md_fields`` of the struct, each read signed (1) or not (0)."""
    acc = isa.accelerator
    names = dict.fromkeys(["km_kind", *(f for f in acc.md_fields if f.startswith("km_"))])
    return [{"name": n, "signed": int(n in acc.signed_fields)} for n in names]


def render_fields(isa: Isa, out_dir: Path) -> Path:
    """``kk_fields.h`` for ``isa`` in ``out_dir``: the row fields ``kk_layout()`` describes to Python."""
    from ..render import render_tree

    (path,) = render_tree("accel", out_dir, {"fields": md_fields(isa)}, [],
                          f"kinstkit's host build of the {isa.name} core", only=(FIELDS_TEMPLATE,))
    return path


def render_headers(isa: Isa, out_dir: Path) -> None:
    """The headers the host build renders into its folder: ``kinst_encoding.h`` and ``kk_fields.h``."""
    render_encoding(isa, out_dir)
    render_fields(isa, out_dir)


def _compiler() -> str:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    raise UserError("no C compiler (cc, gcc or clang): kinstkit compiles its analysis core "
                    "(sys/modules/kinst/<arch>/kinst_core.c) on first use; install gcc (./bootstrap does)")


@functools.lru_cache(maxsize=None)
def _capstone() -> tuple[Path, Path]:
    """(include, lib) of the capstone library the Python binding ships: the decoder of record, called from C.
    Found once a process (its key and its loading both ask)."""
    import importlib.util

    spec = importlib.util.find_spec("capstone")  # found, not imported: importing it costs 30 ms a process
    root = Path(spec.origin).resolve().parent if spec is not None and spec.origin else None
    if root is None or not (root / "include" / "capstone" / "capstone.h").is_file() or \
            not (root / "lib" / "libcapstone.so").is_file():
        raise UserError("the capstone Python package has no include/capstone/capstone.h and lib/libcapstone.so: "
                        "kinstkit builds its analysis against them; pip install capstone (./bootstrap does)")
    return root / "include", root / "lib"


def _sources(isa: Isa) -> list[Path]:
    """The generic walk, the ISA's step, and the portable core in the ISA's C folders (``Kmod.kinst_dirs``:
    its own, then what it shares, e.g. ``dbp/kinst_core_dbp.c``)."""
    acc = isa.accelerator
    # kinst_core*.[ch], listed rather than globbed: a glob compiles a regular expression (0.3 ms a process).
    core = [p for d in isa.kmod.kinst_dirs for p in sorted((SYS_MODULES / "kinst" / d).iterdir())
            if p.name.startswith("kinst_core") and p.suffix in (".c", ".h")]
    return [GENERIC_DIR / "kk_host.c", GENERIC_DIR / "kk_host.h", acc.walk_c, *acc.headers, *acc.sources, *core,
            SYS_MODULES / "kinst" / "kinst_funcs.c", SYS_MODULES / "kinst" / "kinst_funcs.h"]


FLAGS = ("-std=c99", "-O2", "-flto", "-shared", "-fPIC")


def compile_command(isa: Isa, cc: str, out_dir: Path, flags: Sequence[str] = FLAGS) -> list[str]:
    """The command that builds ``isa``'s library into ``out_dir`` (which must hold the rendered headers,
    ``render_headers``): the generic walk, the ISA's step and its portable core.  It is not linked to capstone:
    the walk loads capstone the first time it meets an encoding its tables do not know (``kk_decode()``)."""
    inc, _ = _capstone()
    sources = _sources(isa)
    dirs = sorted({str(p.parent) for p in sources})
    return [cc, *flags, f"-I{inc}", f"-I{out_dir}", *(f"-I{d}" for d in dirs),
            "-o", str(out_dir / LIB_NAME), *(str(p) for p in sources if p.suffix == ".c")]


def library_path(isa: Isa) -> Path:
    """The built library for ``isa``'s current sources (compiled now if need be)."""
    from ..common.ccache import compile_cached, content_key

    cc = _compiler()
    parts: list[Any] = [" ".join(compile_command(isa, cc, Path("."))),
                        (TEMPLATE_DIR / "kinst" / ENCODING_TEMPLATE).read_bytes(),
                        repr(sorted(encoding.context(isa).items())),
                        (TEMPLATE_DIR / "accel" / FIELDS_TEMPLATE).read_bytes(), repr(md_fields(isa))]
    parts += [p.read_bytes() for p in _sources(isa)]

    def make(tmp: Path) -> None:
        from ..common.tools import checked, run_tool

        render_headers(isa, tmp)
        checked(run_tool, compile_command(isa, cc, tmp), f"compiling kinstkit's {isa.name} analysis core")

    return compile_cached(CACHE_DIR, f"{isa.name}-{content_key(parts)}", make, marker=LIB_NAME) / LIB_NAME


class Field(NamedTuple):
    """A field of ``struct kk_row``, as ``kk_layout()`` describes it."""

    offset: int
    size: int
    signed: bool


class _KkField(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("off", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("signed", ctypes.c_uint32)]


class _KkJField(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("source", ctypes.c_uint32), ("off", ctypes.c_uint32),
                ("size", ctypes.c_uint32), ("type", ctypes.c_uint32)]


class _KkVocab(ctypes.Structure):
    """``struct kk_vocab`` (kk_host.h): the ISA's vocabulary, filled from its facts; ``kk_init()`` refuses one
    whose ``size`` is not its own struct's."""

    _fields_ = [("size", ctypes.c_size_t),
                ("reasons", ctypes.POINTER(ctypes.c_char_p)), ("nreasons", ctypes.c_uint),
                ("names", ctypes.POINTER(ctypes.c_char_p)), ("name_codes", ctypes.POINTER(ctypes.c_uint8)),
                ("nnames", ctypes.c_uint),
                ("kinds", ctypes.POINTER(ctypes.c_char_p)), ("nkinds", ctypes.c_uint),
                ("classes", ctypes.POINTER(ctypes.c_char_p)), ("nclasses", ctypes.c_uint),
                ("status_ok", ctypes.c_char_p), ("status_skip", ctypes.c_char_p), ("kind_skip", ctypes.c_char_p),
                ("jfields", ctypes.POINTER(_KkJField)), ("njfields", ctypes.c_uint),
                ("capstone", ctypes.c_char_p)]


INIT_LAYOUT = 1  # what kk_init() says besides 0 (KK_INIT_*)


def _strings(items: Sequence[str]) -> ctypes.Array:
    return (ctypes.c_char_p * max(1, len(items)))(*(s.encode() for s in items))


class Host:
    """The loaded library of one ISA, set up with that ISA's data."""

    def __init__(self, isa: Isa, path: Path):
        self.isa = isa
        self.acc = isa.accelerator
        self.lib = ctypes.CDLL(str(path))
        self._bind()
        self.rowsize, self.fields = self._layout()
        self._keep: list[Any] = []
        self._json_args: dict[tuple[str, tuple[str, ...]], tuple[Any, ...]] = {}  # summary_json()'s C arrays
        self._init()
        self._reader, self._read_names, self._read_at = self._row_reader()
        self.row = ctypes.create_string_buffer(self.rowsize)
        self.text = ctypes.create_string_buffer(4096)

    def _bind(self) -> None:
        lib = self.lib
        u8p, u64p = ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_uint64)
        sig = {
            "kk_init": ((ctypes.POINTER(_KkVocab),), ctypes.c_int),
            "kk_layout": ((ctypes.c_uint, ctypes.POINTER(ctypes.c_uint32)), ctypes.POINTER(_KkField)),
            "kk_json_sources": ((), ctypes.c_char_p),
            "kk_json_types": ((), ctypes.c_char_p),
            "kk_classify": ((ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p,
                             ctypes.c_void_p), ctypes.c_int),
            "kk_row_reason": ((ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t), None),
            "kk_row_text": ((ctypes.c_void_p, ctypes.c_int), ctypes.c_char_p),
            "kk_prologue": ((ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t), ctypes.c_uint),
            "kk_summary_columns": ((), ctypes.c_uint),
            "kk_summary_layout": ((*[ctypes.POINTER(ctypes.c_uint)] * 4, ctypes.POINTER(ctypes.c_uint32)), None),
            "kk_summarise": ((ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_void_p), None),
            "kk_summary_json": ((ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_char_p, ctypes.c_void_p,
                                 ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)), ctypes.c_size_t),
            "kk_function_rows": ((ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int,
                                  ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                                  ctypes.POINTER(ctypes.c_uint)), ctypes.c_int),
            "kk_json_emit_many": ((ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                   *[ctypes.c_void_p] * 4, ctypes.c_char_p, *[ctypes.c_void_p] * 3, ctypes.c_uint,
                                   ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p), ctypes.c_long),
            "kk_json_put": ((ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t), ctypes.c_int),
            "kk_json_flush": ((ctypes.c_int,), ctypes.c_int),
            "kk_json_discard": ((), None),
            "kk_json_buffer": ((ctypes.POINTER(ctypes.c_void_p),), ctypes.c_size_t),
            "kk_cache_hit_count": ((), ctypes.c_ulong),
        }
        del u8p, u64p
        for name, (args, res) in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res

    def _layout(self) -> tuple[int, dict[str, Field]]:
        size = ctypes.c_uint32()
        fields: dict[str, Field] = {}
        i = 0
        while True:
            f = self.lib.kk_layout(i, ctypes.byref(size))
            if not f:
                break
            name = f.contents.name.decode().replace("kr_md.", "")
            fields[name] = Field(f.contents.off, f.contents.size, bool(f.contents.signed))
            i += 1
        return size.value, fields

    def _init(self) -> None:
        acc, isa = self.acc, self.isa
        reasons = ["", *acc.reasons]
        names = sorted(acc.names.items())
        sources = self.lib.kk_json_sources().decode().split()
        types = self.lib.kk_json_types().decode().split()
        jfields = []
        for i, (key, source, how) in enumerate(acc.json_fields):
            lit = ("{" if i == 0 else ",") + f'"{key}":'
            if source in sources:
                jfields.append((lit.encode(), sources.index(source), 0, 0, 0))
            else:
                f = self.fields[source]
                jfields.append((lit.encode(), sources.index("row"), f.offset, f.size, types.index(how)))
        kinds = [k.kind for k in isa.table_kinds]
        vocab = _KkVocab(ctypes.sizeof(_KkVocab), _strings(reasons), len(reasons), _strings([n for n, _ in names]),
                         (ctypes.c_uint8 * max(1, len(names)))(*(c for _, c in names)), len(names),
                         _strings(kinds), len(kinds), _strings(acc.classes), len(acc.classes),
                         STATUS_OK.encode(), STATUS_SKIP.encode(), KIND_SKIP.encode(),
                         (_KkJField * len(jfields))(*jfields), len(jfields),
                         str(_capstone()[1] / "libcapstone.so").encode())  # the wheel's (it has no .so.5 name)
        self._keep.append(vocab)  # the C keeps pointers into what it holds (its _objects)
        got = self.lib.kk_init(ctypes.byref(vocab))
        if got != 0:
            raise UserError(f"{self.lib._name}: kk_init() refused the vocabulary: hostcore.py's _KkVocab is not "
                            "kk_host.h's struct kk_vocab, or there are more JSON fields than KK_JFIELDS; make them agree")
        self._keep += acc.init(self.lib) or []

    # -- one row, read out ----------------------------------------------------

    def _row_reader(self) -> tuple[struct.Struct, tuple[str, ...], int]:
        """One ``struct`` format that reads every field ``verdict`` needs from a row at once (a field at a time
        was most of a per-instruction report's time): the format, the names in its order, where it starts."""
        want = dict.fromkeys([*self.acc.md_fields, "kr_reason", "kr_target", "kr_flags", "km_kind"])
        names = sorted(want, key=lambda n: self.fields[n].offset)
        start = pos = self.fields[names[0]].offset
        fmt = "<"
        for n in names:
            f = self.fields[n]
            fmt += "x" * (f.offset - pos)
            code = {1: "b", 2: "h", 4: "i", 8: "q"}[f.size] if n not in self.acc.byte_fields else ""
            fmt += f"{f.size}s" if not code else (code if f.signed else code.upper())
            pos = f.offset + f.size
        return struct.Struct(fmt), tuple(names), start

    def row_reason(self, row_addr: int) -> str:
        self.lib.kk_row_reason(row_addr, self.text, len(self.text))
        return self.text.value.decode()

    def classify(self, b: bytes, address: int, mnemonic: str, operands: str) -> Verdict:
        """kinst's verdict on one instruction that capstone decoded (``Isa.classify``)."""
        row = self.row
        if self.lib.kk_classify(b, len(b), address & 0xFFFFFFFFFFFFFFFF, mnemonic.encode(), operands.encode(),
                                row) != NEXT:
            raise ClassifierError(f"{address:#x}: {b.hex()} ({mnemonic} {operands}): the portable core's reading "
                                  "of the instruction (its kind, a rip-relative displacement, a branch's address) "
                                  "and capstone's text disagree, or the core cannot read it")
        return self.verdict(row, 0, ctypes.addressof(row))

    def verdict(self, buf, base: int, addr: int) -> Verdict:
        """The ``Verdict`` of the row at ``buf[base:]`` (``addr`` its address, for its text)."""
        row = dict(zip(self._read_names, self._reader.unpack_from(buf, base + self._read_at)))
        md = self.acc.md_record(row)
        target = row["kr_target"] if row["kr_flags"] & 1 else None
        if row["kr_reason"]:
            return Verdict(STATUS_SKIP, self.row_reason(addr), KIND_SKIP, md, target)
        return Verdict(STATUS_OK, "", self.isa.table_kinds[row["km_kind"]].kind, md, target)

    def prologue(self, code: bytes, offsets: Sequence[int]) -> int:
        """The prologue rules (bit i: ``Accelerator.prologue_rules[i]``) a function of instructions at
        ``offsets`` passes."""
        offs = array("I", offsets)
        return self.lib.kk_prologue(code, len(code), offs.buffer_info()[0] if offs else None, len(offs))

    # -- whole functions ---------------------------------------------------------

    def summary_layout(self) -> "SummaryLayout":
        cols = [ctypes.c_uint() for _ in range(4)]
        deferred = ctypes.c_uint32()
        self.lib.kk_summary_layout(*(ctypes.byref(c) for c in cols), ctypes.byref(deferred))
        return SummaryLayout(self.lib.kk_summary_columns(), *(c.value for c in cols), deferred.value)

    def summarise(self, span: bytes, base: int, starts: Sequence[int], limits: Sequence[int]) -> array:
        """``kk_summarise()``'s counters (``summary_layout()``) of each function ``span[start : start + limit]``,
        ``span`` being at address ``base`` (a step checks alignment, and what capstone prints, by it)."""
        n = len(starts)
        starts_a, limits_a = array("Q", starts), array("Q", limits)
        out = array("I", bytes(4 * self.lib.kk_summary_columns() * n))
        if n:
            self.lib.kk_summarise(span, len(span), base & 0xFFFFFFFFFFFFFFFF, n, starts_a.buffer_info()[0], limits_a.buffer_info()[0],
                                  out.buffer_info()[0])
        return out

    def summary_json(self, counts: array, rule_bit: int, reason: str, kinds: Sequence[str]) -> list[str]:
        """Each function's ``--summary --json`` line from ``"eligible"`` on, made by ``kk_summary_json()`` of
        ``summarise()``'s ``counts``; "" for a deferred function.  ``reason`` (a failed prologue rule) and
        ``kinds`` (``Isa.table_kinds``' names) come as JSON strings; the kinds are listed in name order."""
        key = (reason, tuple(kinds))
        args = self._json_args.get(key)
        if args is None:
            order = sorted(range(len(kinds)), key=lambda i: kinds[i])
            args = self._json_args[key] = (reason.encode("ascii"), _strings(kinds),
                                           (ctypes.c_uint * max(1, len(kinds)))(*order))
        n = len(counts) // self.lib.kk_summary_columns()
        at = ctypes.c_void_p()
        size = self.lib.kk_summary_json(counts.buffer_info()[0], n, rule_bit, args[0], args[1], args[2],
                                        ctypes.byref(at))
        if size == ctypes.c_size_t(-1).value:
            raise MemoryError("kk_summary_json")
        return ctypes.string_at(at.value, size).decode("ascii").split("\n")[:n]

    def rows(self, code: bytes, limit: int, address: int, text: int = TEXT_REFUSED) -> Optional["Rows"]:
        """The rows of the function ``code[:limit]`` at ``address`` (``code`` runs on into its section), with the
        reasons of its refused instructions; None when Python must do it (``analysis.probes.analyse``)."""
        ptr, n, prologue = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_uint()
        if self.lib.kk_function_rows(code, len(code), limit, address & 0xFFFFFFFFFFFFFFFF, text, ctypes.byref(ptr),
                                     ctypes.byref(n), ctypes.byref(prologue)) != NEXT:
            return None
        size = self.rowsize
        data = ctypes.string_at(ptr.value, size * n.value) if n.value else b""
        reason = self.fields["kr_reason"].offset
        reasons = {i: self.row_reason(ptr.value + i * size) for i, r in enumerate(data[reason::size]) if r}
        return Rows(self, data, n.value, prologue.value, reasons)

    def column(self, data: bytes, name: str) -> bytes:
        """One byte-wide field of every row in ``data``, as bytes."""
        f = self.fields[name]
        assert f.size == 1, name
        return data[f.offset :: self.rowsize]

    def json_writer(self) -> "JsonWriter":
        return JsonWriter(self.lib)


_NONZERO_FF = bytes((0xFF if b else 0) for b in range(256))


class SummaryLayout(NamedTuple):
    """Where ``kk_summarise()`` puts a function's counters (``kk_summary_layout()``)."""

    columns: int  # counters per function
    n: int  # instructions, or ``deferred``
    prologue: int  # the prologue rules passed, bit i: Accelerator.prologue_rules[i]
    refused: int  # instructions refused
    first_kind: int  # probes of table kind 0; the others follow in Isa.table_kinds order
    deferred: int  # in ``n``: Python must do the function


class Rows(NamedTuple):
    """One function's rows, copied out of the library."""

    host: "Host"
    data: bytes  # ``n`` rows of ``host.rowsize`` bytes
    n: int
    prologue: int  # the prologue rules it passes (bit i: Accelerator.prologue_rules[i])
    reasons: dict[int, str]  # row index -> the reason of a refused instruction

    def column(self, name: str) -> bytes:
        return self.host.column(self.data, name)

    def kinds(self) -> bytes:
        """Each row's table kind (an index of ``Isa.table_kinds``), 0xff where the instruction is refused."""
        n = self.n
        refused = self.column("kr_reason").translate(_NONZERO_FF)
        return (int.from_bytes(self.column("km_kind"), "little") | int.from_bytes(refused, "little")).to_bytes(
            n, "little")

    def records(self) -> bytes:
        """The function's table records (``Isa.stream_records``), with no relocated fields."""
        return self.host.isa.stream_records(self.column("kr_len"), self.kinds(), self.column("km_dispoff"))

    def offsets(self) -> list[int]:
        f = self.host.fields["kr_off"]
        return [int.from_bytes(self.data[i : i + f.size], "little")
                for i in range(f.offset, len(self.data), self.host.rowsize)]


class JsonWriter:
    """``probes --all --json``'s lines written by the library: a chunk's whole lines through its own buffer to a
    file (``emit_many``), with the functions it hands back written by Python in their place (``put``).

    One per worker: its buffers grow to the largest function seen.
    """

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib

    def chunk(self, rule_bit: int, head_ok: str, prologue_head: str, prologue_rec: str) -> "JsonChunk":
        """An empty chunk for ``emit_many``, with what every line of it shares."""
        return JsonChunk(rule_bit, head_ok, prologue_head, prologue_rec)

    def emit_many(self, fd: int, chunk: "JsonChunk", first: int) -> int:
        """Append the lines of ``chunk``'s functions from ``first`` on; the index of the first one handed back
        to Python (``len(chunk)`` when none is)."""
        a = chunk.arrays
        got = self.lib.kk_json_emit_many(fd, chunk.code, first, len(chunk), *(x.buffer_info()[0] for x in a[:4]),
                                         chunk.strings, *(x.buffer_info()[0] for x in a[4:]), chunk.rule_bit,
                                         chunk.head_ok, chunk.prologue_head, chunk.prologue_rec)
        if got < 0:
            raise OSError(5, "writing the JSON chunk failed")
        return got

    def put(self, fd: int, data: bytes) -> None:
        """Append bytes Python wrote, in order with the library's lines."""
        if self.lib.kk_json_put(fd, data, len(data)) != 0:
            raise OSError(5, "writing the JSON chunk failed")

    def flush(self, fd: int) -> None:
        if self.lib.kk_json_flush(fd) != 0:
            raise OSError(5, "writing the JSON chunk failed")

    def take(self, fill) -> bytes:
        """What ``fill()`` writes to fd -1 (the library keeps it), taken out of the library's buffer."""
        try:
            fill()
            at = ctypes.c_void_p()
            n = self.lib.kk_json_buffer(ctypes.byref(at))
            return ctypes.string_at(at.value, n) if n else b""
        finally:
            self.discard()

    def discard(self) -> None:
        """Drop what is buffered, after a chunk failed half-way."""
        self.lib.kk_json_discard()


class JsonChunk:
    """A chunk of functions laid out for ``kk_json_emit_many``: one buffer of their bytes, one of strings,
    and an array per field, so that C writes the whole chunk in a call or a few."""

    def __init__(self, rule_bit: int, head_ok: str, prologue_head: str, prologue_rec: str):
        self.rule_bit = rule_bit
        self.head_ok, self.prologue_head, self.prologue_rec = head_ok.encode(), prologue_head.encode(), prologue_rec.encode()
        self.codes: list[bytes] = []
        self.texts: list[str] = []
        self.pos = self.text_pos = 0
        # start, len, limit, address; head, excluded head, excluded records (string offsets, -1: none)
        self.arrays = (array("Q"), array("Q"), array("Q"), array("Q"), array("q"), array("q"), array("q"))
        self.code = self.strings = b""

    def __len__(self) -> int:
        return len(self.arrays[0])

    def _text(self, text: Optional[str]) -> int:
        if text is None:
            return -1
        at = self.text_pos
        self.texts.append(text)
        self.text_pos += len(text) + 1
        return at

    def add_code(self, code: bytes) -> int:
        """Append bytes to the chunk's buffer (a function's, or a run of them); where they start in it."""
        at = self.pos
        self.codes.append(code)
        self.pos += len(code)
        return at

    def add(self, start: int, length: int, limit: int, address: int, head: str, excl_head: Optional[str],
            excl_rec: Optional[str]) -> None:
        """A function whose bytes (with a tail up to ``length``) are at ``start`` of the chunk's buffer."""
        starts, ln, lim, addr, h, eh, er = self.arrays
        starts.append(start)
        ln.append(length)
        lim.append(min(limit, length))
        addr.append(address)
        h.append(self._text(head))
        eh.append(-1 if excl_head is None else self._text(excl_head))
        er.append(-1 if excl_rec is None else self._text(excl_rec))

    def seal(self) -> "JsonChunk":
        """Join the pieces; ASCII only (Python writes a function whose strings are not)."""
        self.code = b"".join(self.codes)
        self.strings = "".join(t + "\0" for t in self.texts).encode("ascii")
        return self


@functools.lru_cache(maxsize=None)
def host(isa_name: str) -> Host:
    """The host library of the ISA called ``isa_name``, built if need be and set up."""
    from .. import isa as registry

    isa = registry.by_name(isa_name)
    return Host(isa, library_path(isa))


def classify(isa_name: str, b: bytes, address: int, mnemonic: str, operands: str) -> Verdict:
    """``Isa.classify`` for an ISA whose rule is its portable core's."""
    if mnemonic == BAD:
        from .. import isa as registry

        isa = registry.by_name(isa_name)
        return Verdict(STATUS_SKIP, isa.accelerator.undecodable, KIND_SKIP, isa.skip_md(len(b)), None)
    return host(isa_name).classify(b, address, mnemonic, operands)


def frame_verdict(isa_name: str, insns: Sequence[Insn], code: bytes, rule: str) -> str:
    """``Isa.frame_verdict``: "" when the function passes the prologue rule ``rule``, else why not."""
    if rule == PROLOGUE_NONE:
        return ""  # no rule: the kernel's own annotations refuse what it guards against (ring-0 guest)
    h = host(isa_name)
    bit = 1 << h.acc.prologue_rules.index(rule)
    return "" if h.prologue(code, [i.offset for i in insns]) & bit else h.isa.prologue_reasons[rule]


def for_isa(isa: Isa) -> Optional[Host]:
    """``isa``'s host library, built and loaded if need be (before workers fork, so that they share it), or None
    for an ISA whose rule is not (yet) its portable core's."""
    return host(isa.name) if isa.accelerator is not None else None
