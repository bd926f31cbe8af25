"""fetch-release against a loopback HTTP server serving small tarballs the tests make.

The server (http.server on 127.0.0.1, in a thread) plays the FreeBSD mirror:
``/releases/amd64/<release>/MANIFEST`` plus the three sets.  Cases: a good
release, a bad checksum, a truncated download, a missing file, a server that
is down, and an archive that tries to escape the cache.  Every failure must
be one clear line, and the cache must hold nothing of a failed fetch.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

import pytest

from generator.common.errors import UserError
from generator.kmod.release import DISTS, fetch_release, fetched, parse_manifest
from generator.common.paths import REPO

RELEASE = "14.3-RELEASE"
PREFIX = f"/releases/amd64/{RELEASE}/"


def txz(files: Dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def release_sets() -> Dict[str, bytes]:
    return {
        "src.txz": txz({
            "./usr/src/sys/sys/param.h": b"#define\t__FreeBSD_version\t1403000\n",
            "./usr/src/sys/conf/kmod.mk": b"# stand-in\n",
            "./usr/src/share/mk/bsd.kmod.mk": b"# stand-in\n",
            "./usr/src/bin/ls/ls.c": b"int main(void) { return 0; }\n",  # not needed: not unpacked
        }),
        "kernel.txz": txz({"./boot/kernel/kernel": b"\x7fELF stand-in kernel", "./boot/kernel/dtrace.ko": b"ko"}),
        "kernel-dbg.txz": txz({"./usr/lib/debug/boot/kernel/kernel.debug": b"debug"}),
    }


def manifest_for(sets: Dict[str, bytes]) -> bytes:
    lines = [f"{name}\t{hashlib.sha256(data).hexdigest()}\t1\t{name[:-4]}\t\"{name}\"\ton"
             for name, data in sets.items()]
    return ("\n".join(lines) + "\n").encode()


class Mirror:
    """What the loopback server serves: path -> bytes, with per-path misbehaviour."""

    def __init__(self) -> None:
        self.files: Dict[str, bytes] = {}
        self.truncate: Dict[str, int] = {}  # path -> bytes actually sent (Content-Length stays full)
        self.requests: list = []


@pytest.fixture
def mirror() -> Iterator[Tuple[Mirror, str]]:
    state = Mirror()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            state.requests.append(self.path)
            data = state.files.get(self.path)
            if data is None:
                self.send_error(404, "Not Found")
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: state.truncate.get(self.path, len(data))])
            if self.path in state.truncate:
                self.close_connection = True

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def publish(state: Mirror, sets: Optional[Dict[str, bytes]] = None, manifest: Optional[bytes] = None) -> None:
    sets = sets if sets is not None else release_sets()
    for name, data in sets.items():
        state.files[PREFIX + name] = data
    state.files[PREFIX + "MANIFEST"] = manifest if manifest is not None else manifest_for(sets)


def cache_is_clean(cache: Path) -> bool:
    """Nothing of a failed fetch: no release directory, no temporary directory."""
    releases = cache / "releases" / "amd64"  # this machine's ISA: fetch-release's default --target
    return not releases.exists() or not any(releases.iterdir())


def test_good_release_is_verified_and_unpacked(mirror, tmp_path: Path) -> None:
    state, url = mirror
    publish(state)
    out = io.StringIO()
    rel = fetch_release(RELEASE, url, str(tmp_path), out=out)
    assert rel.complete()
    assert (rel.sysdir / "sys" / "param.h").read_bytes().startswith(b"#define\t__FreeBSD_version\t1403000")
    assert (rel.root / "usr" / "src" / "share" / "mk" / "bsd.kmod.mk").is_file()
    assert not (rel.root / "usr" / "src" / "bin").exists()  # only sys/ and share/mk of src.txz
    assert rel.kernel.read_bytes().startswith(b"\x7fELF")
    assert (rel.module_dir / "dtrace.ko").is_file()
    assert rel.kernel_debug.is_file()
    for d in DISTS:
        assert f"{RELEASE}: {d} verified" in out.getvalue()
    assert f"next: invoke build --release {RELEASE}" in out.getvalue()
    assert sorted(p.name for p in (tmp_path / "releases" / "amd64").iterdir()) == [RELEASE]  # no temporaries left
    # Fetched once, found the second time: no request reaches the server.
    before = len(state.requests)
    again = io.StringIO()
    assert fetched(RELEASE, str(tmp_path)).root == rel.root
    fetch_release(RELEASE, url, str(tmp_path), out=again)
    assert "already fetched and verified" in again.getvalue() and len(state.requests) == before


def test_bad_checksum_is_refused_and_nothing_is_kept(mirror, tmp_path: Path) -> None:
    state, url = mirror
    sets = release_sets()
    listed = dict(sets, **{"kernel.txz": sets["kernel.txz"] + b"x"})  # the MANIFEST describes other bytes
    publish(state, sets, manifest_for(listed))
    with pytest.raises(UserError) as e:
        fetch_release(RELEASE, url, str(tmp_path), out=io.StringIO())
    msg = str(e.value)
    assert "kernel.txz" in msg and "does not match the MANIFEST" in msg and "\n" not in msg
    assert cache_is_clean(tmp_path)


def test_truncated_download_is_an_error_not_a_file(mirror, tmp_path: Path) -> None:
    state, url = mirror
    publish(state)
    state.truncate[PREFIX + "src.txz"] = len(state.files[PREFIX + "src.txz"]) // 2
    with pytest.raises(UserError) as e:
        fetch_release(RELEASE, url, str(tmp_path), out=io.StringIO())
    assert "src.txz" in str(e.value) and "truncated" in str(e.value)
    assert cache_is_clean(tmp_path)


def test_missing_file_names_the_url(mirror, tmp_path: Path) -> None:
    state, url = mirror
    publish(state)
    del state.files[PREFIX + "kernel-dbg.txz"]
    with pytest.raises(UserError) as e:
        fetch_release(RELEASE, url, str(tmp_path), out=io.StringIO())
    assert f"{PREFIX}kernel-dbg.txz: not found (HTTP 404)" in str(e.value)
    assert cache_is_clean(tmp_path)


def test_missing_release_is_a_404_on_the_manifest(mirror, tmp_path: Path) -> None:
    _, url = mirror
    with pytest.raises(UserError, match=r"MANIFEST: not found \(HTTP 404\)"):
        fetch_release(RELEASE, url, str(tmp_path), out=io.StringIO())
    assert cache_is_clean(tmp_path)


def test_server_down(tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there any more
    with pytest.raises(UserError) as e:
        fetch_release(RELEASE, f"http://127.0.0.1:{port}", str(tmp_path), out=io.StringIO())
    assert "cannot connect" in str(e.value) and f"127.0.0.1:{port}" in str(e.value)
    assert cache_is_clean(tmp_path)


def test_archive_escaping_the_cache_is_refused(mirror, tmp_path: Path) -> None:
    state, url = mirror
    sets = release_sets()
    sets["kernel.txz"] = txz({"../../escaped": b"x"})
    publish(state, sets)
    with pytest.raises(UserError, match="outside the cache"):
        fetch_release(RELEASE, url, str(tmp_path), out=io.StringIO())
    assert not (tmp_path / "escaped").exists() and cache_is_clean(tmp_path)


def test_a_failed_refetch_keeps_the_good_copy(mirror, tmp_path: Path) -> None:
    state, url = mirror
    publish(state)
    rel = fetch_release(RELEASE, url, str(tmp_path), out=io.StringIO())
    state.truncate[PREFIX + "kernel.txz"] = 10
    with pytest.raises(UserError, match="truncated"):
        fetch_release(RELEASE, url, str(tmp_path), force=True, out=io.StringIO())
    assert rel.complete() and rel.kernel.is_file()
    assert sorted(p.name for p in (tmp_path / "releases" / "amd64").iterdir()) == [RELEASE]


def test_manifest_and_release_name_checks() -> None:
    assert parse_manifest("base.txz\t" + "a" * 64 + "\t1\tbase\t\"Base\"\ton\n", "u") == {"base.txz": "a" * 64}
    with pytest.raises(UserError, match="line 1 is not a MANIFEST entry"):
        parse_manifest("<html>mirror error page</html>\n", "u")
    with pytest.raises(UserError, match="14.3-RELEASE"):
        fetched("14.3", "/nonexistent")
    with pytest.raises(UserError, match="run `invoke fetch-release --release 14.3-RELEASE` first"):
        fetched(RELEASE, "/nonexistent")


def test_cli_error_is_one_line(mirror, tmp_path: Path) -> None:
    state, url = mirror
    publish(state)
    state.files[PREFIX + "MANIFEST"] = manifest_for({**release_sets(), "src.txz": b"other"})
    res = subprocess.run([sys.executable, "-m", "generator", "fetch-release", "--release", RELEASE, "--mirror", url,
                          "--cache", str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "src.txz" in lines[0] and "SHA256" in lines[0], res.stderr
    assert cache_is_clean(tmp_path)
