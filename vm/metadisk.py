"""The meta disk: a tar on the VM's second virtio-blk disk (FreeBSD CI's protocol).

In: the guest script (``run.sh``), the check library (``lib/checks.sh``), the
expected-output specs (``expect.tsv``), the modules (``modules/*.ko``), the
switches ``auto-shutdown`` and ``interactive``, and ``kinstkit.json`` (what the
host asked for).  Out: the guest hook writes ``/meta`` back over the same disk,
now with ``out/``: ``script.log``, ``script.status``, ``checks.tsv`` and one
``NAME.out`` per check (formats: vm/guest/lib/checks.sh).

The file is sized up front (the guest cannot grow a disk) with room for the
results; a tar reader stops at the archive's end marker, so whatever the
guest's shorter or longer archive leaves behind it is never read.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .config import GUEST_DIR, VMError

LIB = GUEST_DIR / "lib" / "checks.sh"
MIB = 1024 * 1024
MIN_SIZE = 32 * MIB
RESULTS_ROOM = 32 * MIB  # what the guest's out/ may use
# Besides the .ko files, what a modules directory may carry into the guest.
MODULE_COMPANIONS = ("*.json", "dtmalloc.list")


@dataclass(frozen=True)
class Spec:
    """One line of expect.tsv."""

    name: str  # check name
    exit: str  # wanted exit status, or "*"
    limit: str  # seconds, or "-"
    match: str  # ERE some output line must match, or "-"
    reject: str  # ERE no output line may match, or "-"


def parse_expect(text: str, origin: str = "expect.tsv") -> List[Spec]:
    """Parse and check expected-output specs; a bad line is an error naming it."""
    specs, seen = [], set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 5 or any(f == "" for f in fields):
            raise VMError(f"{origin}:{n}: expected 5 tab-separated fields (use '-' for none), got {len(fields)}")
        spec = Spec(*fields)
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", spec.name):
            raise VMError(f"{origin}:{n}: check name '{spec.name}' may hold only letters, digits, '_', '.', '-'")
        if spec.name in seen:
            raise VMError(f"{origin}:{n}: check '{spec.name}' is specified twice")
        if spec.exit != "*" and not spec.exit.isdigit():
            raise VMError(f"{origin}:{n}: exit status '{spec.exit}' is not a number or '*'")
        if spec.limit != "-" and not spec.limit.isdigit():
            raise VMError(f"{origin}:{n}: time limit '{spec.limit}' is not whole seconds or '-'")
        for what, rx in (("match", spec.match), ("reject", spec.reject)):
            if rx != "-":
                try:
                    re.compile(rx)  # Python's syntax is close enough to ERE to catch typos
                except re.error as e:
                    raise VMError(f"{origin}:{n}: {what} pattern /{rx}/: {e}")
        seen.add(spec.name)
        specs.append(spec)
    return specs


def module_files(modules_dir: Optional[Path]) -> List[Path]:
    """The .ko files of a modules directory, and their companions (manifest, listing)."""
    if modules_dir is None:
        return []
    kos = sorted(modules_dir.glob("*.ko"))
    extra = sorted({p for pat in MODULE_COMPANIONS for p in modules_dir.glob(pat)})
    return kos + extra


@dataclass(frozen=True)
class MetaContents:
    """What goes into the meta disk."""

    script: Path  # becomes run.sh
    expect: Optional[Path]  # becomes expect.tsv
    modules: Tuple[Path, ...] = ()  # become modules/<name>
    extra: Tuple[Tuple[Path, str], ...] = ()  # (file or directory, name in the tar)
    auto_shutdown: bool = True  # the hook powers off after writing the results back
    interactive: bool = False  # vm-shell: a shell instead of the script
    info: Dict[str, object] = field(default_factory=dict)  # kinstkit.json


def build(path: Path, contents: MetaContents) -> List[str]:
    """Write the meta disk tar at ``path``; returns the member names."""
    names: List[str] = []
    now = int(time.time())

    def add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mode, ti.mtime = len(data), mode, now
        tar.addfile(ti, io.BytesIO(data))
        names.append(name)

    def add_dir(tar: tarfile.TarFile, name: str) -> None:
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, now
        tar.addfile(ti)
        names.append(name)

    expect_text = contents.expect.read_text() if contents.expect else ""
    if contents.expect:
        parse_expect(expect_text, str(contents.expect))
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        # The first member's header is what the hooks look for ("ustar" at 257).
        add_bytes(tar, "run.sh", contents.script.read_bytes(), 0o755)
        add_dir(tar, "lib")
        add_bytes(tar, "lib/checks.sh", LIB.read_bytes())
        if contents.expect:
            add_bytes(tar, "expect.tsv", expect_text.encode())
        add_dir(tar, "modules")
        for ko in contents.modules:
            add_bytes(tar, f"modules/{ko.name}", ko.read_bytes())
        for src, name in contents.extra:
            if src.is_dir():
                add_dir(tar, name)
                for p in sorted(src.rglob("*")):
                    rel = f"{name}/{p.relative_to(src).as_posix()}"
                    if p.is_dir():
                        add_dir(tar, rel)
                    else:
                        add_bytes(tar, rel, p.read_bytes(), 0o755 if p.stat().st_mode & 0o111 else 0o644)
            else:
                add_bytes(tar, name, src.read_bytes(), 0o755 if src.stat().st_mode & 0o111 else 0o644)
        if contents.auto_shutdown:
            add_bytes(tar, "auto-shutdown", b"")
        if contents.interactive:
            add_bytes(tar, "interactive", b"")
        add_bytes(tar, "kinstkit.json", (json.dumps(contents.info, indent=1, sort_keys=True) + "\n").encode())
        add_dir(tar, "out")
    used = path.stat().st_size
    size = max(MIN_SIZE, -(-(2 * used + RESULTS_ROOM) // MIB) * MIB)
    with open(path, "r+b") as f:
        f.truncate(size)
    return names


@dataclass(frozen=True)
class CheckLine:
    """One line of out/checks.tsv, as the guest wrote it."""

    name: str
    verdict: str  # pass, fail or skip
    exit: Optional[int]
    reason: str


@dataclass(frozen=True)
class GuestResults:
    """What came back on the meta disk."""

    written: bool  # the guest wrote out/ back (script.status present)
    script_status: Optional[int]
    script_log: str
    checks: Tuple[CheckLine, ...]
    outputs: Dict[str, str]  # check name -> its NAME.out
    members: Tuple[str, ...]


MAX_OUTPUT = 64 * 1024  # per check, in the result; the whole file stays in the run directory


def read_results(path: Path, save_to: Optional[Path] = None) -> GuestResults:
    """Read ``out/`` back from the meta disk; copy it to ``save_to`` when given."""
    try:
        tar = tarfile.open(path, "r:")
    except (tarfile.TarError, OSError):
        return GuestResults(False, None, "", (), {}, ())
    files: Dict[str, bytes] = {}
    members: List[str] = []
    with tar:
        try:
            for m in tar:
                name = m.name[2:] if m.name.startswith("./") else m.name
                members.append(name)
                if name.startswith("out/") and m.isfile():
                    f = tar.extractfile(m)
                    files[name[4:]] = f.read() if f else b""
        except tarfile.TarError:
            pass  # a half-written archive: keep what was readable
    if save_to is not None:
        save_to.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            if "/" not in name and name not in ("", ".", ".."):
                (save_to / name).write_bytes(data)
    status_text = files.get("script.status", b"").decode(errors="replace").strip()
    status = int(status_text) if status_text.lstrip("-").isdigit() else None
    checks = tuple(_check_lines(files.get("checks.tsv", b"").decode(errors="replace")))
    outputs = {
        name[:-4]: _clip(data.decode(errors="replace"))
        for name, data in files.items()
        if name.endswith(".out")
    }
    return GuestResults(
        written="script.status" in files,
        script_status=status,
        script_log=_clip(files.get("script.log", b"").decode(errors="replace")),
        checks=checks,
        outputs=outputs,
        members=tuple(members),
    )


def _check_lines(text: str) -> Iterable[CheckLine]:
    for line in text.splitlines():
        f = line.split("\t")
        if len(f) < 3:
            continue
        code = int(f[2]) if f[2].lstrip("-").isdigit() else None
        yield CheckLine(f[0], f[1], code, f[3] if len(f) > 3 else "")


def _clip(text: str) -> str:
    if len(text) <= MAX_OUTPUT:
        return text
    return text[: MAX_OUTPUT // 2] + "\n[... clipped ...]\n" + text[-MAX_OUTPUT // 2 :]


def members(path: Path) -> Sequence[str]:
    with tarfile.open(path, "r:") as tar:
        return tar.getnames()
