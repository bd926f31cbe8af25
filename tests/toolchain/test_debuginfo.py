"""Finding an image's DWARF: every convention, and the refusal of a debug file that is not the image's.

The sample kernel is split the way distributions ship kernels and
libraries (objcopy --only-keep-debug, --strip-debug, --add-gnu-debuglink)
and its debug file placed where each convention looks, under a temporary
root standing in for /usr/lib/debug.  The answers from a split image must
be the answers from the whole one.  The machine's libm is the real case: its
DWARF is only in libc6-dbg's file under /usr/lib/debug/.build-id/.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Tuple

import pytest

from generator.analysis.indexcache import open_index
from generator.analysis.lines import line_sites
from generator.common.errors import UserError
from generator.image import debuginfo
from generator.image.elf import KernelImage
from helpers.dtmalloc_fixtures import assert_one_line_error, run_cli
from helpers.skips import require_tools

WHY = "splits the sample kernel into an image and its debug file"
LINE = "vm_fault.c:186"


def _objcopy(*args: str) -> None:
    subprocess.run(["objcopy", *args], check=True, capture_output=True)


def _split(kernel: Path, where: Path, build_id: bool = True, link: bool = False) -> Tuple[Path, Path]:
    """(stripped image, debug file) in ``where``; without a build-id note when ``build_id`` is False."""
    require_tools("objcopy", why=WHY)
    where.mkdir(parents=True, exist_ok=True)
    whole = where / "whole"
    shutil.copy(kernel, whole)
    if not build_id:
        _objcopy("--remove-section", ".note.gnu.build-id", str(whole))
    image, debug = where / "kernel", where / "kernel.debug"
    _objcopy("--only-keep-debug", str(whole), str(debug))
    _objcopy("--strip-debug", str(whole), str(image))
    if link:
        _objcopy(f"--add-gnu-debuglink={debug}", str(image))
    whole.unlink()
    return image, debug


def _sites(img: KernelImage, tmp: Path, **kw) -> list:
    index, _ = open_index(img, cache_dir=tmp / "cache", **kw)
    return [(s.function, s.offset, s.file, s.line, s.inlined) for s in line_sites(img, index, LINE)]


@pytest.fixture(scope="module")
def expected(sample_kernel, tmp_path_factory) -> list:
    return _sites(KernelImage.open(str(sample_kernel)), tmp_path_factory.mktemp("whole"))


def test_the_image_itself_comes_first(sample_kernel, tmp_path):
    info = debuginfo.locate(KernelImage.open(str(sample_kernel)), roots=[str(tmp_path)])
    assert info.found_by == debuginfo.BY_IMAGE and info.path == str(sample_kernel)


def test_by_build_id(sample_kernel, tmp_path, expected):
    image, debug = _split(sample_kernel, tmp_path / "img")
    img = KernelImage.open(str(image))
    target = Path(debuginfo.build_id_path(str(tmp_path / "root"), img.build_id))
    target.parent.mkdir(parents=True)
    shutil.move(debug, target)
    info = debuginfo.locate(img, roots=[str(tmp_path / "root")])
    assert (info.found_by, info.path) == (debuginfo.BY_BUILD_ID, str(target))
    assert _sites(img, tmp_path, roots=[str(tmp_path / "root")]) == expected


@pytest.mark.parametrize("place", ["beside", ".debug", "root"])
def test_by_debuglink(sample_kernel, tmp_path, expected, place):
    image, debug = _split(sample_kernel, tmp_path / "img", build_id=False, link=True)
    img = KernelImage.open(str(image))
    assert img.build_id is None and debuginfo.debuglink(img) == ("kernel.debug", debuginfo.file_crc32(str(debug)))
    root = tmp_path / "root"
    if place == ".debug":
        (image.parent / ".debug").mkdir()
        debug = debug.rename(image.parent / ".debug" / debug.name)
    elif place == "root":
        moved = root / str(image.parent).lstrip("/") / debug.name
        moved.parent.mkdir(parents=True)
        debug = debug.rename(moved)
    info = debuginfo.locate(img, roots=[str(root)])
    assert (info.found_by, info.path) == (debuginfo.BY_DEBUGLINK, str(debug))
    assert _sites(img, tmp_path, roots=[str(root)]) == expected


def test_freebsd_convention(sample_kernel, tmp_path, expected):
    image, debug = _split(sample_kernel, tmp_path / "boot" / "kernel")
    root = tmp_path / "usr-lib-debug"
    target = root / (str(image).lstrip("/") + ".debug")
    target.parent.mkdir(parents=True)
    shutil.move(debug, target)
    info = debuginfo.locate(KernelImage.open(str(image)), roots=[str(root)])
    assert (info.found_by, info.path) == (debuginfo.BY_FREEBSD, str(target))
    assert _sites(KernelImage.open(str(image)), tmp_path, roots=[str(root)]) == expected


def test_named_with_debug(sample_kernel, tmp_path, expected):
    image, debug = _split(sample_kernel, tmp_path / "img")
    img = KernelImage.open(str(image))
    assert _sites(img, tmp_path, debug=str(debug), roots=[]) == expected
    with pytest.raises(UserError, match="no DWARF"):
        debuginfo.locate(img, debug=str(image), roots=[])


def test_a_fully_stripped_image_takes_the_debug_files_symbols(sample_kernel, tmp_path, expected):
    image, debug = _split(sample_kernel, tmp_path / "img")
    _objcopy("--strip-all", str(image))
    img = KernelImage.open(str(image))
    assert not img.has_symtab() and not img.functions()
    assert _sites(img, tmp_path, debug=str(debug)) == expected
    assert img.lookup("vm_fault").size > 0


def test_debuglink_crc_mismatch_is_one_line(sample_kernel, tmp_path):
    image, debug = _split(sample_kernel, tmp_path / "img", build_id=False, link=True)
    _objcopy("--add-section", f".comment.extra={image}", str(debug))  # the debug file changes; the link does not
    assert_one_line_error(run_cli("probes", "--kernel", str(image), "--line", LINE), ".gnu_debuglink CRC mismatch",
                          "kernel.debug")


def test_build_id_mismatch_is_one_line(sample_kernel, lua_gcc, tmp_path):
    image, _ = _split(sample_kernel, tmp_path / "img")
    other = tmp_path / "other.debug"
    _objcopy("--only-keep-debug", str(lua_gcc), str(other))
    assert_one_line_error(run_cli("probes", "--kernel", str(image), "--line", LINE, "--debug", str(other)),
                          "build-id mismatch")


def test_a_machine_library_with_a_separate_debug_file(libm_debug):
    img = KernelImage.open(str(libm_debug))
    assert not img.has_section(".debug_info") and not img.has_symtab()
    exported = {f.name for f in img.functions()}
    index, info = open_index(img)
    assert info.found_by == debuginfo.BY_BUILD_ID and info.path.startswith("/usr/lib/debug/.build-id/")
    assert index.counts()["inlined_copies"] > 1000
    local = {f.name for f in img.functions()} - exported
    assert local, "the debug file's .symtab adds the library's local functions"
