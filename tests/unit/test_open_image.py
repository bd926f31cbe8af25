"""``image.open_image``: one object per file while it is held, a new one when the file changes."""

from __future__ import annotations

import gc
import shutil
from pathlib import Path

import pytest

from generator.common.errors import UserError
from generator.image import open_image

LIB = Path("/usr/lib/x86_64-linux-gnu/libz.so.1")


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    if not LIB.exists():
        pytest.skip(f"{LIB} (zlib1g) is not installed")
    dst = tmp_path / "libz.so"
    shutil.copyfile(LIB.resolve(), dst)
    return dst


def test_the_same_file_is_one_object_while_held(lib: Path) -> None:
    a = open_image(str(lib))
    assert open_image(str(lib)) is a
    assert open_image(str(lib), any_machine=True) is not a  # another validation, another object


def test_a_rewritten_file_is_read_again(lib: Path) -> None:
    a = open_image(str(lib))
    fns = len(a.functions())
    data = lib.read_bytes()
    lib.unlink()
    lib.write_bytes(data[:64])  # a new file at the same path: a truncated, corrupt one
    with pytest.raises(UserError):
        open_image(str(lib))
    assert len(a.functions()) == fns  # the first image still reads its own mapping


def test_an_image_nobody_holds_is_let_go(lib: Path) -> None:
    from generator import image

    img = open_image(str(lib))
    assert [k for k in image._OPEN.keys() if k[0] == str(lib)]
    del img
    gc.collect()
    assert not [k for k in image._OPEN.keys() if k[0] == str(lib)]


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        open_image(str(tmp_path / "nothing"))
