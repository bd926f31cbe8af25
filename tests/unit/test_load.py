"""load/unload: the command lines and the error mapping, with a stand-in for FreeBSD's tools.

``hostops`` runs every command through a ``run`` callable.  Here that is a
fake that answers ``id``, ``sysctl``, ``kldstat``, ``kldload``,
``kldunload``, ``mkdir`` and ``scp`` the way FreeBSD does (exit status and
messages as kldload(8)/kldunload(8) print them) and records what was run.
The real path needs a FreeBSD host with root and a build for its kernel, and
runs only there: tests/toolchain/test_load_freebsd.py.
"""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

from generator.common.tools import Completed
from generator.common.errors import UserError
from generator.common.paths import REPO
from generator.run.hostops import Target, kldload_error, kldunload_error, load, unload
from helpers import skips

BID = "1deef0f07f8c775bce9ff4a6ac34922d52fafca7"
OTHER = "0123456789abcdef0123456789abcdef01234567"


class FakeFreeBSD:
    """Answers like a FreeBSD 14 host; ``answers`` overrides a command (by its first word)."""

    def __init__(self, build_id: str = BID, uid: str = "0", loaded: Sequence[str] = (),
                 answers: Optional[Dict[str, Completed]] = None):
        self.build_id, self.uid, self.loaded = build_id, uid, set(loaded)
        self.answers = answers or {}
        self.calls: List[List[str]] = []

    def __call__(self, argv: Sequence[str]) -> Completed:
        argv = list(argv)
        self.calls.append(argv)
        words = shlex.split(argv[-1]) if argv[0] == "ssh" else argv
        if argv[0] == "scp":
            words = argv
        tool = Path(words[0]).name
        if tool in self.answers:
            return self.answers[tool]
        if tool == "id":
            return Completed(0, self.uid + "\n", "")
        if tool == "sysctl":
            return Completed(0, self.build_id + "\n", "")
        if tool == "kldstat":
            return Completed(0 if words[-1] in self.loaded else 1, "", "")
        if tool == "kldload":
            return Completed(0, f"Loaded {words[-1]}, id=7\n", "")
        if tool == "kldunload":
            name = words[-1][:-3]
            if name not in self.loaded:
                return Completed(1, "", f"kldunload: can't find file {words[-1]}\n")
            return Completed(0, f"Unloading {words[-1]}, id=7\n", "")
        if tool in ("mkdir", "scp"):
            return Completed(0, "", "")
        raise AssertionError(f"unexpected command {argv}")

    def tools(self) -> List[str]:
        out = []
        for argv in self.calls:
            words = shlex.split(argv[-1]) if argv[0] == "ssh" else argv
            out.append(Path(words[0]).name)
        return out


def make_build(root: Path, build_id: str = BID, modules: Sequence[str] = ("kinst", "dtmalloc"),
               check_ok: bool = True) -> Path:
    """A build/<build-id>/ directory with manifests and .ko files, as `invoke build` leaves it."""
    bdir = root / build_id
    bdir.mkdir(parents=True)
    for m in modules:
        ko = bdir / f"{m}.ko"
        ko.write_bytes(b"\x7fELF stand-in module " + m.encode())
        (bdir / f"{m}.json").write_text(json.dumps({
            "module": m, "ko": {"path": str(ko), "sha256": "0" * 64}, "table_build_id": build_id,
            "check_ko": {"ok": check_ok},
        }))
    return bdir


def test_load_over_ssh_checks_then_copies_then_loads(tmp_path: Path) -> None:
    bdir = make_build(tmp_path)
    fake = FakeFreeBSD()
    out = io.StringIO()
    assert load(["kinst", "dtmalloc"], Target("root@fbsd", "root@fbsd"), tmp_path, run=fake, out=out) == 0
    assert fake.tools() == ["id", "sysctl", "kldstat", "kldstat", "mkdir", "scp", "kldload", "mkdir", "scp",
                            "kldload"]
    ssh = fake.calls[1]
    assert ssh[:4] == ["ssh", "-o", "BatchMode=yes", "root@fbsd"] and ssh[4] == "sysctl -n kern.build_id"
    assert fake.calls[2][-1] == "kldstat -q -m kinst"
    assert fake.calls[5] == ["scp", "-q", "-o", "BatchMode=yes", str(bdir / "kinst.ko"),
                             f"root@fbsd:/tmp/kinstkit/{BID}/kinst.ko"]
    assert fake.calls[6][-1] == f"kldload -v /tmp/kinstkit/{BID}/kinst.ko"
    assert "kinst: loaded on root@fbsd" in out.getvalue() and "matches the tables" in out.getvalue()


def test_load_locally_uses_the_build_of_the_running_kernel(tmp_path: Path) -> None:
    make_build(tmp_path, OTHER)
    bdir = make_build(tmp_path, BID)
    fake = FakeFreeBSD()
    load(["kinst"], Target(), tmp_path, run=fake, out=io.StringIO())
    assert fake.calls[-1] == ["kldload", "-v", str((bdir / "kinst.ko").resolve())]


def test_build_id_mismatch_refuses_before_loading(tmp_path: Path) -> None:
    make_build(tmp_path, OTHER)
    fake = FakeFreeBSD(build_id=BID)
    with pytest.raises(UserError) as e:
        load(["kinst"], Target("h", "h"), tmp_path, run=fake, out=io.StringIO())
    assert f"made for kernel build-id {OTHER}" in str(e.value) and f"runs {BID}" in str(e.value)
    assert "kldload" not in fake.tools() and "scp" not in fake.tools()


def test_not_root(tmp_path: Path) -> None:
    make_build(tmp_path)
    fake = FakeFreeBSD(uid="1001")
    with pytest.raises(UserError, match="need root on h: run as root or use --host root@h"):
        load(["kinst"], Target("user@h", "h"), tmp_path, run=fake, out=io.StringIO())
    assert fake.tools() == ["id"]


def test_stock_module_already_loaded(tmp_path: Path) -> None:
    make_build(tmp_path)
    fake = FakeFreeBSD(loaded=["dtmalloc"])
    with pytest.raises(UserError) as e:
        load(["kinst", "dtmalloc"], Target("h", "h"), tmp_path, run=fake, out=io.StringIO())
    assert "module dtmalloc is already loaded" in str(e.value) and "kldunload dtmalloc" in str(e.value)
    assert "kldload" not in fake.tools()  # refused before loading either module


def test_a_module_that_failed_check_ko_is_not_loaded(tmp_path: Path) -> None:
    make_build(tmp_path, check_ok=False)
    with pytest.raises(UserError, match="check-ko failed"):
        load(["kinst"], Target("h", "h"), tmp_path, run=FakeFreeBSD(), out=io.StringIO())


@pytest.mark.parametrize("stderr, expect", [
    ("kldload: can't load /tmp/kinst.ko: Operation not permitted", "not permitted: loading modules needs root"),
    ("kldload: can't load /tmp/kinst.ko: module already loaded or in kernel", "run `kldunload kinst` first"),
    ("kldload: can't load /tmp/kinst.ko: File exists", "already loaded"),
    ("kldload: can't load /tmp/kinst.ko: Exec format error", "run invoke check-ko"),
    ("kldload: can't load /tmp/kinst.ko: No such file or directory", "dtrace.ko, opensolaris.ko"),
])
def test_kldload_messages(stderr: str, expect: str, tmp_path: Path) -> None:
    make_build(tmp_path)
    fake = FakeFreeBSD(answers={"kldload": Completed(1, "", stderr + "\n")})
    with pytest.raises(UserError) as e:
        load(["kinst"], Target("h", "h"), tmp_path, run=fake, out=io.StringIO())
    assert expect in str(e.value) and "\n" not in str(e.value)
    assert kldload_error("kinst", Completed(1, "", stderr), Target()).startswith("kldload kinst: ")


def test_unload_in_reverse_order(tmp_path: Path) -> None:
    fake = FakeFreeBSD(loaded=["kinst", "dtmalloc"])
    out = io.StringIO()
    assert unload(["kinst", "dtmalloc"], Target("h", "h"), run=fake, out=out) == 0
    assert [c[-1] for c in fake.calls[1:]] == ["kldunload -v dtmalloc.ko", "kldunload -v kinst.ko"]
    assert "kinst: unloaded from h" in out.getvalue()


def test_unload_busy_and_not_loaded(capsys) -> None:
    busy = Completed(1, "", "kldunload: can't unload file: Device busy\n")
    fake = FakeFreeBSD(loaded=["kinst"], answers={"kldunload": busy})
    assert unload(["kinst"], Target("h", "h"), run=fake, out=io.StringIO()) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "module busy" in err[0] and "stop dtrace" in err[0]
    fake = FakeFreeBSD(loaded=[])
    assert unload(["dtmalloc"], Target("h", "h"), run=fake, out=io.StringIO()) == 1
    assert "dtmalloc.ko is not loaded" in capsys.readouterr().err
    assert "needs root" in kldunload_error("kinst", Completed(1, "", "kldunload: Operation not permitted"))


def test_where_commands_run() -> None:
    with pytest.raises(UserError, match="this host is Linux: use --host H"):
        Target.choose(None, None, sysname="Linux")
    with pytest.raises(UserError, match="give one"):
        Target.choose("a", "b")
    assert Target.choose(None, "fbsd-vm").argv(["kldstat"]) == ["ssh", "-o", "BatchMode=yes", "fbsd-vm", "kldstat"]
    assert Target.choose(None, None, sysname="FreeBSD").argv(["kldstat", "-v"]) == ["kldstat", "-v"]


def test_cli_on_linux_without_a_host_is_one_line() -> None:
    import subprocess
    import sys

    skips.require_other_than_freebsd("`load` without --host runs kldload here")
    res = subprocess.run([sys.executable, "-m", "generator", "load"], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "--host" in res.stderr
