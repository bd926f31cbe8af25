"""The contract every ISA implements, and the records stage 2 hands on.

FreeBSD keeps one ``kinst_isa.c`` per architecture behind ``kinst.h``; here each
ISA is one package under ``generator/isa/`` that builds one ``Isa`` record.
Machine-independent code (the image reader, the probe walk, the plan, the
oracles) asks the image for its ``Isa`` and uses only what this module
defines; it never imports an ISA package or branches on an ISA's name.

An ISA provides:

- ``decode``: the instruction walk over a function's bytes (capstone is the
  decoder of record), as ``Insn`` records;
- ``classify``: kinst's verdict for one instruction, as a ``Verdict`` whose
  ``md`` is the ISA's own probe-metadata record (its ``struct
  kinst_probe_md``);
- ``context_refusals`` and ``frame_verdict``: the refusals that need more than
  one instruction (given the walk and the function's bytes), and kinst's
  function-prologue rule;
- its patch value, trampoline size, per-ISA exclusion list, table kinds and
  flag bits (what the generated C header mirrors);
- its relocation types (what the image reader applies to an ET_REL file);
- its oracle quirks: how GNU objdump and valgrind see its instructions.
"""

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Optional

from .immediates import ImmLayout

STATUS_OK = "ok"
STATUS_SKIP = "skip"
KIND_SKIP = "skip"  # the kind of every refused instruction
BAD = "(bad)"  # the mnemonic of bytes no decoder could decode


class Insn(NamedTuple):
    """One instruction of a function, as the decode walk found it."""

    offset: int  # from the function symbol
    length: int
    mnemonic: str  # as capstone prints it (AT&T on amd64)
    operands: str


class Verdict(NamedTuple):
    """What ``classify`` says of one instruction."""

    status: str  # STATUS_OK or STATUS_SKIP
    reason: str  # why it is refused ("" when ok)
    kind: str  # how a hit resumes: one of the ISA's table kinds, or KIND_SKIP
    md: Any  # the ISA's probe-metadata record (a NamedTuple with to_json())
    target: Optional[int]  # direct branch or call target, when the bytes say it


class StreamInsn(NamedTuple):
    """One instruction as a compact table records it (the ISA's ``stream_decode``)."""

    offset: int  # from the function symbol
    length: int
    kind: Optional[str]  # one of the ISA's table kinds; None: refused, no probe
    dispoff: int  # riprel: where the rel32 is in the instruction (0 otherwise)
    masks: tuple[tuple[int, int], ...]  # (offset, width) of fields a relocation fills


# A probe's JSON record (``report.probe_dict``, and the host walk's formatter): the keys before the ISA's
# probe metadata, and after it.  Each is a field of ``analysis.records.Probe`` (``bytes`` in hex).
PROBE_JSON_HEAD = ("offset", "address", "length", "bytes", "mnemonic", "operands", "status", "reason", "kind")
PROBE_JSON_TAIL = ("target", "target_symbol")


class TableKind(NamedTuple):
    """One way a hit resumes, as the generated C enum spells it."""

    kind: str  # the name analysis and reports use ("call-direct")
    c_name: str  # the enumerator (KINST_K_CALL_DIRECT)
    doc: str


class TableKinds(tuple[TableKind, ...]):
    """An ISA's table kinds in the order of their C enum values: the rows of its ``kinds.txt`` (``load_kinds``).

    Python code names a kind through ``names`` or ``code``, which fail on a
    kind the ISA does not have: a misspelt kind stops the import of the
    module that names it, as a misspelt enumerator stops a C build.
    """

    @functools.cached_property
    def _codes(self) -> dict[str, int]:
        """kind -> its C enum value."""
        return {k.kind: i for i, k in enumerate(self)}

    def code(self, kind: str) -> int:
        """The C enum value of ``kind``."""
        try:
            return self._codes[kind]
        except KeyError:
            raise KeyError(f"no table kind {kind!r}: the ISA's kinds.txt has {', '.join(self._codes)}") from None

    def names(self, *kinds: str) -> tuple[str, ...]:
        """``kinds``, each checked to be one of these."""
        for kind in kinds:
            self.code(kind)
        return kinds


# A row of kinds.txt: NAME [CNAME] | DOC.  The enumerator is KINST_K_<CNAME>, or without one, NAME upper-cased
# with "-" and "." as "_"; a CNAME is written only where it differs from that (b.cond -> KINST_K_BCOND).
# Read with str methods, not a regular expression: every command imports an ISA, and compiling one cost
# 0.4 ms of each.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")
_CNAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _kind_row(line: str) -> Optional[tuple[str, Optional[str], str]]:
    """(NAME, CNAME or None, DOC) of a kinds.txt row: NAME of ``[a-z][a-z0-9.-]*``, CNAME of
    ``[A-Z][A-Z0-9_]*``, a DOC; None for a line that is not one."""
    head, bar, doc = line.partition("|")
    words, doc = head.split(), doc.strip()
    if not bar or not doc or not 1 <= len(words) <= 2 or line[0].isspace():
        return None
    name, cname = words[0], words[1] if len(words) == 2 else None
    if not (name[0].isalpha() and set(name) <= _NAME_CHARS):
        return None
    if cname is not None and not (cname[0].isalpha() and set(cname) <= _CNAME_CHARS):
        return None
    return name, cname, doc


def load_kinds(path: Path) -> TableKinds:
    """An ISA's table kinds from its ``kinds.txt``: one row per kind, ``NAME [CNAME] | DOC``, in the order
    of the C enum; blank lines and lines from ``#`` are comments.

    Strict, as Linux's gen-insn-attr-x86.awk is with its opcode map: a row it
    cannot read, a kind or enumerator named twice, a CNAME the rule would
    derive anyway, or the refused instructions' ``skip``, stops the import
    with the file and line.
    """
    rows: list[TableKind] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = _kind_row(line)
        if fields is None:
            raise ValueError(f"{path}:{n}: not a table kind row, NAME [CNAME] | DOC: {line!r}")
        name, cname, doc = fields
        derived = name.upper().replace("-", "_").replace(".", "_")
        if cname == derived:
            raise ValueError(f"{path}:{n}: {cname} is what {name} derives: drop it")
        row = TableKind(name, f"KINST_K_{cname or derived}", doc)
        if name == KIND_SKIP:
            raise ValueError(f"{path}:{n}: {name} is the kind of a refused instruction, not a table kind")
        if any(r.kind == name or r.c_name == row.c_name for r in rows):
            raise ValueError(f"{path}:{n}: {name} or {row.c_name} is named twice")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no table kinds")
    return TableKinds(rows)


class CConst(NamedTuple):
    """One constant the generated C header defines: a flag bit, a record code."""

    c_name: str
    value: int
    doc: str


FlagBit = CConst  # a per-probe flag bit of the probe metadata


class ByteSet(NamedTuple):
    """A set of byte values the portable core tests (an opcode fact), rendered into kinst_encoding.h."""

    c_name: str  # the initialiser's macro: KINST_SET_PREFIX
    members: frozenset[int]
    doc: str


class WordSet(NamedTuple):
    """A list of values the portable core looks a field up in (an encoding fact), rendered into kinst_encoding.h
    as an initialiser ``{ a, b, ... }`` and its length ``<c_name>_N``."""

    c_name: str  # the initialiser's macro: KINST_EXC_SYSREGS
    members: tuple[int, ...]  # in the order the core reports an index of
    doc: str


class CoreRefusal(NamedTuple):
    """An instruction the portable core itself refuses: a ``KINST_RF_*`` code of ``kinst_core_dissect()``.

    The code is the refusal's place in ``Isa.refusals``, from 1; the core
    returns it, in the kernel (a table record naming such an instruction is
    refused) and on the host (the analysis refuses the instruction with
    ``reason``).
    """

    c_name: str  # KINST_RF_REL16
    key: str  # a short name, for the C comment and the tests
    reason: str  # what the user is told, after the instruction's mnemonic


class RelocType(NamedTuple):
    """A relocation type the image reader knows for this ISA."""

    name: str  # R_X86_64_PC32
    width: int  # bytes of the field it fills (0: a type kinstkit does not know)
    pcrel: bool  # S + A - P rather than S + A
    applied: bool  # False: listed so its field is never read as final, but not applied


class RelocTable(NamedTuple):
    """An ISA's psABI relocation table (``isa/<arch>/relocs.txt``), as the image reader uses it."""

    reloc_type: Callable[[int], Optional[RelocType]]  # ``Isa.reloc_type``
    fields: Mapping[str, str]  # an applied type's name -> the immediate field (or pair) its value goes into


# A relocs.txt row's "how": fills nothing, applied as S + A or S + A - P, or only listed.
_RELOC_HOW = {"abs": (True, False), "pcrel": (True, True), "listed": (False, False)}


def reloc_table(path: Path) -> RelocTable:
    """An ISA's relocation types, from its psABI's table in ``path``: tab-separated rows ``type name bytes
    how field`` (``#`` starts a comment line).  ``how`` is ``none`` (fills nothing: None), ``abs`` or
    ``pcrel`` (applied), or ``listed``: known but not applied (GOT, TLS, narrow fields), so that a field it
    fills is never read as its final value, and is masked where a table compares bytes.  ``field`` names
    the immediate layout an applied value goes into (``-``: a little-endian store).

    A type the table lacks has width 0 and the name ``<prefix><type>``, the
    prefix the table's names share: nothing is applied, and a table refuses a
    function holding one (it cannot tell which bytes the loader will change).
    """
    known: dict[int, Optional[RelocType]] = {}
    fields: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            rtype, name, width, how, field = line.split("\t")
            known[int(rtype)] = None if how == "none" else RelocType(name, int(width), _RELOC_HOW[how][1],
                                                                     _RELOC_HOW[how][0])
        except (ValueError, KeyError):
            raise ValueError(f"{path}:{n}: not a row 'type<TAB>name<TAB>bytes<TAB>how<TAB>field'") from None
        if field != "-":
            fields[name] = field
    names = sorted(r.name for r in known.values() if r is not None)  # the first and last share the most
    shared = next((i for i, (a, b) in enumerate(zip(names[0], names[-1])) if a != b), len(names[0]))
    prefix = names[0][:shared].rpartition("_")[0] + "_"  # what every name begins with: R_X86_64_

    def reloc_type(rtype: int) -> Optional[RelocType]:
        if rtype in known:
            return known[rtype]
        return RelocType(f"{prefix}{rtype}", 0, False, False)

    return RelocTable(reloc_type, fields)


class Accelerator(NamedTuple):
    """An ISA's host walk around its portable core: what ``isa/hostcore.py`` builds, and the data it hands the C.

    The rule comes from the core (``sys/modules/kinst/<arch>/kinst_core.c``);
    the ISA's step (``walk_c``) finds instructions and adds what needs
    capstone's text; everything the C prints or looks up is here, as data.
    """

    walk_c: Path  # generator/isa/<arch>/accel/kk_walk.c: the ISA's step
    headers: tuple[Path, ...]  # other files of the ISA's it includes (a generated opcode table)
    reasons: tuple[str, ...]  # reason texts by code from 1: the core's refusals (Isa.refusals), then the step's
    names: Mapping[str, int]  # capstone mnemonics refused by name -> their reason code
    undecodable: str  # the reason of bytes capstone cannot decode
    prologue_rules: tuple[str, ...]  # the prologue rules, in the order of the step's bits (kk_isa_prologue())
    md_fields: tuple[str, ...]  # the row fields the probe metadata is made from
    md_record: Callable[[dict[str, Any]], Any]  # those fields -> the ISA's probe-metadata record
    md_json: tuple[tuple[str, str, str], ...]  # the metadata in a probe's JSON: (key, row field, how written)
    byte_fields: frozenset[str] = frozenset()  # row fields that are bytes, not numbers
    # row fields read as signed numbers: a C signed field, or a byte whose 0xff means "none" (-1)
    signed_fields: frozenset[str] = frozenset()
    classes: tuple[str, ...] = ()  # names of the step's kr_class values, for JSON
    init: Callable[[Any], list[Any]] = lambda lib: []  # the step's own set-up with the loaded library
    sources: tuple[Path, ...] = ()  # other C the step is built with: a step ISAs share (isa/accel/kk_dbp.c), its header

    @property
    def json_fields(self) -> tuple[tuple[str, str, str], ...]:
        """A probe's whole JSON record: (key, where its value comes from, how a row field is written)."""
        return (tuple((k, k if k != "target_symbol" else "null", "") for k in PROBE_JSON_HEAD) + self.md_json
                + tuple((k, k if k != "target_symbol" else "null", "") for k in PROBE_JSON_TAIL))


# The two records below are NamedTuples rather than frozen dataclasses, like the
# rest of this module: every command imports them, and ``dataclasses`` brings
# ``inspect`` with it, 8 ms of a 100 ms ``probes --all --summary``.


class OracleQuirks(NamedTuple):
    """How the independent tools see this ISA's code, for the decoder and hit-count proofs.

    The defaults are a fixed-width ISA's: no prefixes, nothing objdump prints
    or valgrind counts differently from the CPU.
    """

    branch_mnemonic: Callable[[str], bool]  # objdump's mnemonics of (possibly) direct branches
    pcrel32_relocs: tuple[str, ...]  # relocations whose rel32 field makes a branch target S + A - P
    reloc_target_bias: int  # a branch relocation's target is S + A + this (x86's rel32 ends the instruction)
    conditional_kinds: tuple[str, ...]  # table kinds of conditional branches (both ways get checked)
    prefix_words: frozenset[str] = frozenset()  # words objdump may print before a mnemonic
    no_target_branches: frozenset[str] = frozenset()  # direct branches classify gives no target for (refused)
    lone_prefix: Optional[Callable[[str], bool]] = None  # is objdump's text a prefix the CPU ignores, printed alone?
    lone_prefix_note: str = ""  # what that tolerance is called in the verify-decoder report
    repeats_in_place: Callable[[bytes], bool] = lambda orig: False  # valgrind counts each iteration; the CPU traps once
    # objdump prints as one instruction what the CPU runs as two: the length of the first, else 0
    fused: Callable[[bytes], int] = lambda code: 0
    fused_note: str = ""  # what that tolerance is called in the verify-decoder report
    # objdump's text after "ADDR:\t" -> ("mnemonic operands", inline relocations); None: split at the first tab
    insn_text: Optional[Callable[[str], tuple[str, str]]] = None
    # objdump's "mnemonic operands" -> a direct branch's target; None: the first operand, in hex
    branch_target: Optional[Callable[[str], Optional[int]]] = None
    qemu: str = ""  # the qemu-user emulator that runs this ISA's programs on the host; "": they run natively
    gnu_triple: str = ""  # Debian's multiarch name of the ISA (x86_64-linux-gnu): library folders, cross tools
    debian_arch: str = ""  # Debian's architecture name (amd64, arm64, riscv64): package names

    @property
    def cross_prefix(self) -> str:
        """The cross toolchain's prefix (gcc, objdump) for an ISA run under qemu-user; "": the host's own."""
        return f"{self.gnu_triple}-" if self.qemu else ""

    @property
    def sysroot(self) -> str:
        """The cross C library's root (qemu -L), where Debian's cross packages install it; "" for the host."""
        return f"/usr/{self.gnu_triple}" if self.qemu else ""

    @property
    def objdump(self) -> str:
        """The binutils objdump that decodes it: Debian's cross one (binutils-<triple>), or the host's."""
        return f"{self.cross_prefix}objdump"

    @property
    def cross_packages(self) -> str:
        """The Debian packages that give the cross toolchain, its C library and qemu-user ("" for the host)."""
        if not self.qemu:
            return ""
        return f"gcc-{self.gnu_triple} libc6-dev-{self.debian_arch}-cross qemu-user-static"


class Kmod(NamedTuple):
    """How FreeBSD builds a kernel module for this ISA (``sys/conf/kern.mk``, ``kmod.mk``), and where kinst's C is.

    The build stage (``generator/kmod/``) reads everything ISA-specific from
    here: adding an ISA adds its record, never a branch in the build.
    """

    machine: str  # MACHINE ("amd64", "arm64", "riscv")
    machine_arch: str  # MACHINE_ARCH ("amd64", "aarch64", "riscv64")
    machine_cpuarch: str  # MACHINE_CPUARCH ("amd64", "aarch64", "riscv")
    clang_arch: str  # clang --target=<clang_arch>-unknown-freebsdX.Y
    ld_emulation: str  # ld -m, as kern.mk's LD_EMULATION_<arch> names it
    cflags: tuple[str, ...]  # kern.mk's machine flags (code model, no FPU), before CWARNFLAGS
    include_links: tuple[tuple[str, str], ...]  # kmod.mk's _ILINKS: (link name, the sys/ folder whose include/)
    kinst_dirs: tuple[str, ...]  # folders of sys/modules/kinst/ holding this ISA's C, its own first
    shared: bool = False  # __KLD_SHARED: ld -r into a .kld, then -Bshareable into an ET_DYN .ko; False: ld -r
    ld_flags: tuple[str, ...] = ()  # what kmod.mk adds to every link for this ISA (arm64: --no-relax)
    clang_cflags: tuple[str, ...] = ()  # kern.mk's CFLAGS.clang for this ISA, after CWARNFLAGS
    gcc_spelling: tuple[tuple[str, str], ...] = ()  # (clang's flag, gcc's name for it, "": none) where they differ
    ldscript: str = ""  # sys/conf/<ldscript> the module link uses, "" for none

    @property
    def e_type(self) -> str:
        """The ELF type of a ``.ko`` for this ISA."""
        return "ET_DYN" if self.shared else "ET_REL"


class DwarfReg(NamedTuple):
    """One register as DWARF numbers it, and where a probe reads it."""

    number: int  # the psABI's DWARF register number
    name: str  # the assembler's name
    d_name: str  # dtrace(1)'s index into kinst's regs[] (FreeBSD's cddl/lib/libdtrace/regs_<arch>.d)
    ucontext: str  # the Linux ucontext expression the user-space harness reads it from ("0": hard-wired zero)


class CodeTable(NamedTuple):
    """A section of a kernel image whose entries name code addresses (Linux ``__ex_table``, ``.smp_locks``).

    A field naming an address holds a signed 32-bit offset from the field's
    own address, or with ``absolute`` the 8-byte address itself.  A section
    whose layout changed between kernel versions has one record per layout;
    the proof (``analysis/jumprefs.py``) reads it with the first whose every
    site lands in code.  The one record serves both readers of these tables:
    the jump proof (what a jump may not displace) and the ring-0 guest's
    no-probe rules (``run/ring0/rules.py`` and ``target.py``: where a
    breakpoint may not go, and which sites a digest masks).
    """

    section: str  # the section's name
    entry: int  # bytes per entry
    sites: int  # offset of the field naming an instruction the table's user finds by address (-1: none)
    site_len: int  # bytes from a site that must stay in place (a faulting instruction: 1; a patched jump: 5)
    resume: int  # offset of the field naming where control resumes (a fixup, a jump label's target; -1: none)
    site_doc: str  # what a site is to the kernel: why a jump may not displace it
    resume_doc: str = ""  # what a resume point is: why no jump may cover it
    absolute: bool = False  # the fields hold 8-byte addresses, not 32-bit offsets from themselves
    len_field: int = -1  # offset of a byte giving each site's length (then site_len is ignored; -1: none)
    # Where a linked kernel keeps the table when its linker script merged the section into another: the
    # symbols at its start and end (Linux's vmlinux: __start___jump_table, __stop___jump_table).
    bounds: tuple[str, str] = ("", "")
    # When the kernel rewrites a site: "run" at any moment (a static key flips), "load" once as the image
    # loads (at boot for a vmlinux, whose live text shows it done; at module load for a .ko, whose file does
    # not), "" never.  A digest of text that holds a rewritten site masks it.
    rewritten: str = ""
    # Why a breakpoint may not go at a site (the ring-0 guest's refusal, run/ring0); "": one may
    breakpoint_doc: str = ""


class JumpFacts(NamedTuple):
    """What the trap-free jump probe needs to know of an ISA: the jump's size, and how its code names
    addresses, for the proof that no one enters the bytes the jump overwrites (docs/jump-probes.md)."""

    size: int  # bytes the jump overwrites (amd64: jmp rel32, 5)
    call_kinds: frozenset[str]  # table kinds that push a return address
    riprel_kinds: frozenset[str]  # table kinds whose disp32 names an address relative to the next instruction
    rel32_opcodes: tuple[bytes, ...]  # opcodes followed by a rel32 that ends the instruction (direct branches)
    riprel_modrm: tuple[int, int]  # (mask, value) of a ModR/M byte followed by a %rip-relative disp32
    riprel_imm_max: int  # bytes of immediate that may follow a %rip-relative disp32
    abs_code_width: int  # bytes of a sign-extended absolute address in an instruction (0: none)
    indirect_jump: Callable[[bytes], str]  # an instruction's bytes -> "reg" or "mem" for an indirect jump, else ""
    code_tables: tuple[CodeTable, ...]  # tables of code addresses a kernel may have, read by the proof
    unread_tables: Mapping[str, str]  # sections naming code that the proof does not read -> what they are
    # call kinds a detour may run as its last displaced instruction: those whose target is known when the detour
    # is filled (the harness's jump part emulates them with the core's call rule)
    detour_calls: frozenset[str] = frozenset()


class Isa(NamedTuple):
    """One ISA behind the contract (see the module docstring)."""

    name: str  # FreeBSD's MACHINE_CPUARCH: "amd64"
    e_machine: str  # pyelftools' name of the ELF e_machine: "EM_X86_64"
    patchval: int  # the breakpoint kinst writes
    patchval_size: int  # bytes of it
    tramp_size: int  # bytes per trampoline
    md_excluded: Mapping[str, str]  # kinst_md_excluded(): function name -> reason
    table_kinds: TableKinds  # in the order of their C enum values
    flag_bits: tuple[FlagBit, ...]  # per-probe flag bits of the probe metadata
    record_codes: tuple[CConst, ...]  # the compact table's record codes beyond the table kinds
    prologue_reasons: Mapping[str, str]  # prologue rule -> why a function fails it
    reloc_type: Callable[[int], Optional[RelocType]]  # r_type -> its record; None for R_*_NONE
    oracle: OracleQuirks
    kmod: Kmod  # how FreeBSD builds this ISA's modules, and where its kinst C is
    decode: Callable[[bytes, int, Optional[int]], tuple[list[Insn], str]]
    classify: Callable[[bytes, int, str, str], Verdict]
    context_refusals: Callable[[Sequence[Insn], bytes], dict[int, str]]  # the function's insns and code
    frame_verdict: Callable[[Sequence[Insn], bytes, str], str]
    skip_md: Callable[[int], Any]  # the probe metadata of an instruction of this length that is refused
    table_row: Callable[[Any], dict[str, object]]  # probe metadata -> the generated table's fields
    stream_record: Callable[[int, Optional[str], int, Sequence[tuple[int, int]]], bytes]  # length, kind, dispoff, masks
    stream_decode: Callable[[bytes, Optional[int]], Iterator[StreamInsn]]  # a function's records, read back
    stream_masks: Callable[[bytes, Sequence[tuple[int, int]]], bytes]  # records naming the relocated fields
    # A function's records from columns of its rows (isa/hostcore.py): lengths, kind indexes (0xff: refused), dispoffs.
    stream_records: Optional[Callable[[bytes, bytes, bytes], bytes]] = None
    accelerator: Optional[Accelerator] = None  # the host walk around the ISA's portable core
    byte_sets: tuple[ByteSet, ...] = ()  # opcode facts the portable core tests, as byte sets
    refusals: tuple[CoreRefusal, ...] = ()  # what the portable core refuses by itself, in KINST_RF_* order
    # Encoding facts the portable core tests, as constants (a word's mask and match) and lists of field values.
    core_consts: tuple[CConst, ...] = ()
    word_sets: tuple[WordSet, ...] = ()
    # The immediate fields of its instruction words (isa/immediates.py): the core reads them, relocations write them.
    imm_layouts: tuple[ImmLayout, ...] = ()
    # The ELF mapping symbols ($d data, $x/$a/$t code) mark data inside code on this ISA (AAELF64, the
    # RISC-V psABI): bytes kinst must not patch as instructions.
    mapping_symbols: bool = False
    # Relocation name, field bytes, S + A (- P) -> the field with the value inserted; None: a plain store.
    # For ISAs whose relocations fill bit fields of an instruction word.
    reloc_insert: Optional[Callable[[str, bytes, int], Optional[bytes]]] = None
    # Instruction length -> (where in it the relocation naming a direct branch's target starts, what to add
    # to that relocation's addend to get the target's offset from its symbol); None: no such relocation.
    branch_reloc: Optional[Callable[[int], Optional[tuple[int, int]]]] = None
    # The registers a variable's DWARF location may name that kinst's regs[] holds (source-level --vars).
    dwarf_regs: tuple[DwarfReg, ...] = ()
    # Functions that run only in NMI context, and why a breakpoint there is unsafe: whatever they call
    # directly is refused too (generator/analysis/exclusions.py).  (): the ISA's kernel has no such path.
    nmi_entries: tuple[str, ...] = ()
    nmi_reason: str = ""
    # The trap-free jump probe's facts (docs/jump-probes.md); None: the ISA has no jump probes.
    jump: Optional[JumpFacts] = None

    def __repr__(self) -> str:
        return f"Isa({self.name})"

    def kind_index(self, kind: str) -> int:
        """The C enum value of a table kind."""
        return self.table_kinds.code(kind)


def package_parts(decode: Any, classify: Any, probe_md: Any, table: Any) -> dict[str, Any]:
    """The ``Isa`` fields an ISA package fills from its modules of the conventional names -- ``decode``,
    ``classify``, ``probe_md`` and ``table`` (see the module docstring): the convention is written once, and
    an ISA's record lists only what is its own (``classify`` and ``frame_verdict`` among it: amd64's are the
    portable core's, run on the host)."""
    return dict(
        decode=decode.decode,
        context_refusals=classify.context_refusals,
        prologue_reasons=classify.PROLOGUE_REASONS,
        md_excluded=classify.MD_EXCLUDED,
        skip_md=probe_md.skip_md,
        table_row=probe_md.table_row,
        table_kinds=probe_md.TABLE_KINDS,
        stream_record=table.record,
        stream_decode=table.decode,
        stream_masks=table.with_masks,
        record_codes=table.RECORD_CODES,
    )
