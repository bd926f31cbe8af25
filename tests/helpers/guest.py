"""The FreeBSD guest's test script, run by the host's sh with fake FreeBSD tools.

``vm/guest/freebsd/kinstkit-test.sh`` runs in a FreeBSD guest; here it runs
on the host against ``vm/guest/fakebsd/`` (kldload, kldstat, dtrace ... that
answer as FreeBSD's do), with a meta directory laid out as the meta disk
delivers it.  Shared by the unit tier (faults, no modules) and the toolchain
tier (the dtmalloc listing predicted for the sample kernel).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

from vm.config import GUEST_DIR

FAKEBSD = GUEST_DIR / "fakebsd"
FREEBSD_SCRIPT = GUEST_DIR / "freebsd" / "kinstkit-test.sh"
FREEBSD_EXPECT = GUEST_DIR / "freebsd" / "expect.tsv"
USER_DATA = GUEST_DIR / "freebsd" / "user-data"


def freebsd_meta(tmp_path: Path, modules: Sequence[str] = ("kinst", "dtmalloc"),
                 listing: Optional[Path] = None) -> Path:
    """The meta directory the script reads: checks.sh, the expectations, stand-in .ko files, the listing."""
    meta = tmp_path / "meta"
    (meta / "lib").mkdir(parents=True)
    (meta / "modules").mkdir()
    shutil.copy(GUEST_DIR / "lib" / "checks.sh", meta / "lib")
    shutil.copy(FREEBSD_EXPECT, meta / "expect.tsv")
    for m in modules:
        (meta / "modules" / f"{m}.ko").write_bytes(b"\x7fELF")
    if listing is not None and "dtmalloc" in modules:
        shutil.copy(listing, meta / "modules")
    return meta


def run_freebsd_script(tmp_path: Path, fail: str = "", modules: Sequence[str] = ("kinst", "dtmalloc"),
                       listing: Optional[Path] = None) -> Tuple[Dict[str, Tuple[str, str, str]], Path]:
    """Run the script with the fake tools (``fail`` names the fault they inject); its checks by name
    (verdict, exit, detail), and the meta directory."""
    meta = freebsd_meta(tmp_path, modules, listing)
    env = dict(os.environ, PATH=f"{FAKEBSD}:{os.environ['PATH']}", KINSTKIT_META=str(meta),
               FAKEBSD_STATE=str(tmp_path / "state"), FAKEBSD_FAIL=fail, KINSTKIT_LOAD_SECONDS="1",
               TMPDIR=str(tmp_path), FAKEBSD_DTMALLOC_LIST=str(meta / "modules" / "dtmalloc.list"))
    proc = subprocess.run(["sh", str(FREEBSD_SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = (meta / "out" / "checks.tsv").read_text().splitlines()
    return {f[0]: (f[1], f[2], f[3] if len(f) > 3 else "") for f in (line.split("\t") for line in lines)}, meta
