"""The bench's large foreign library (``bench/bigimage.py``) and apt's download of a package named with its
architecture, without the network: apt is replaced by what it would leave behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from generator.bench import bigimage
from generator.common import apt
from generator.isa import by_name


def test_a_package_named_with_its_architecture_is_found(tmp_path, monkeypatch):
    """``apt-get download libllvm15:arm64`` saves libllvm15_1%3a15.0.6-4+b1_arm64.deb: no colon in the name."""
    def fake_run(argv, cwd, what):
        (Path(cwd) / "libllvm15_1%3a15.0.6-4+b1_arm64.deb").write_bytes(b"deb")
        return ""

    monkeypatch.setattr(apt, "run", fake_run)
    assert apt.download_binary("libllvm15:arm64", "1:15.0.6-4+b1", tmp_path).name.startswith("libllvm15_")


@pytest.mark.parametrize("policy, version", [
    ("libllvm15:arm64:\n  Installed: (none)\n  Candidate: 1:15.0.6-4+b1\n  Version table:\n", "1:15.0.6-4+b1"),
    ("libllvm15:riscv64:\n  Installed: (none)\n  Candidate: (none)\n", ""),
    ("", ""),
])
def test_the_candidate_version(policy, version, monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, policy, ""))
    assert bigimage._candidate("libllvm15:arm64") == version


def test_the_library_is_cached_by_version_and_unpacked_once(tmp_path, monkeypatch):
    monkeypatch.setattr(bigimage, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(bigimage, "_candidate", lambda name: "1:15.0.6-4+b1")
    fetched = []

    def fake_download(name, version, into):
        fetched.append((name, version))
        deb = into / "libllvm15_1%3a15.0.6-4+b1_arm64.deb"
        deb.write_bytes(b"deb")
        return deb

    def fake_run(argv, cwd, what):
        assert argv[0] == "dpkg-deb" and argv[1] == "-x"
        lib = Path(argv[3]) / "usr" / "lib" / "aarch64-linux-gnu" / bigimage.LIBRARY
        lib.parent.mkdir(parents=True)
        lib.write_bytes(b"\x7fELF")
        return ""

    monkeypatch.setattr(apt, "download_binary", fake_download)
    monkeypatch.setattr(apt, "run", fake_run)
    isa = by_name("arm64")
    first = bigimage.library(isa)
    assert first is not None and first.read_bytes() == b"\x7fELF" and "1%15.0.6-4+b1" in str(first)
    assert bigimage.library(isa) == first and fetched == [("libllvm15:arm64", "1:15.0.6-4+b1")]
    assert [p.name for p in first.parent.iterdir()] == [bigimage.LIBRARY]


def test_no_candidate_means_no_library(monkeypatch):
    monkeypatch.setattr(bigimage, "_candidate", lambda name: "")
    assert bigimage.library(by_name("riscv")) is None
