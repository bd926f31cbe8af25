"""The benchmark's own measuring, on small inputs (the figures themselves are `invoke bench`'s job)."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.bench import analysis, arch
from generator.common.paths import REPO
from helpers import cross


def test_timed_reports_the_childs_own_peak_not_the_parents(tmp_path: Path) -> None:
    """With this process at 300 MiB, a child that does nothing must not be reported near that."""
    if not Path(analysis.GNU_TIME).exists():
        pytest.skip(f"{analysis.GNU_TIME} not installed (apt-get install time): it measures each run's peak RSS")
    ballast = bytearray(300 * 2**20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    secs, cpu, rss = analysis._timed(["true"], tmp_path / "out")
    assert rss < 50, rss
    assert secs >= 0 and cpu >= 0
    del ballast


def test_timed_names_a_failing_command(tmp_path: Path) -> None:
    with pytest.raises(analysis.UserError, match="false failed"):
        analysis._timed(["false"], tmp_path / "out")


def test_timed_python_keeps_its_bytecode_in_the_folder_given(tmp_path: Path, monkeypatch) -> None:
    """A compared tree's runs keep their bytecode in their own folder, whatever the caller's environment says
    (PYTHONDONTWRITEBYTECODE would compile every module of every run anew, for one tree and not another)."""
    import sys

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    (tmp_path / "mod_to_compile.py").write_text("X = 1\n")
    code = "import sys, mod_to_compile; print(sys.pycache_prefix, sys.flags.dont_write_bytecode)"
    analysis._timed([sys.executable, "-c", code], tmp_path / "out", cwd=str(tmp_path), pycache=tmp_path / "pyc")
    assert (tmp_path / "out").read_text().split() == [str(tmp_path / "pyc"), "0"]
    assert list((tmp_path / "pyc").rglob("mod_to_compile*.pyc"))
    analysis._timed([sys.executable, "-c", code], tmp_path / "out2", cwd=str(tmp_path))
    assert (tmp_path / "out2").read_text().split() == ["None", "1"]


@pytest.mark.parametrize("name", ["arm64", "riscv"])
def test_arch_analysis_bench_runs(name: str, monkeypatch) -> None:
    """The arch benchmark's analysis step on a small module: both of our runs and the cross objdump counted."""
    cross.require_cross(name, "the arch benchmark compares with the cross objdump")
    ko = cross.freebsd_module(name)["ko"]
    monkeypatch.setattr(arch, "largest_image", lambda _arch: str(ko))
    res = arch.bench_analysis_arch(name)
    runs = res["runs"]
    assert runs["ours"]["instructions"] == runs["ours_full"]["instructions"] > 400
    assert runs["objdump"]["instructions"] > 400 and runs["objdump"]["cpu_seconds"] >= 0
    assert res["ratio_ours_over_objdump"] > 0 and res["ratio_full_over_objdump"] > 0


@pytest.mark.parametrize("name", ["arm64", "riscv"])
def test_arch_large_bench_runs(name: str, monkeypatch) -> None:
    """The large-library step on a small module (the real one is Debian's libLLVM-15): the summary and the cross
    objdump counted, turns taken."""
    cross.require_cross(name, "the arch benchmark compares with the cross objdump")
    ko = cross.freebsd_module(name)["ko"]
    monkeypatch.setattr(arch.bigimage, "library", lambda _isa: ko)
    res = arch.bench_large_arch(name, rounds=2)
    assert res["image"] == str(ko) and res["rounds"] == 2
    assert res["runs"]["ours"]["instructions"] > 400 and res["runs"]["objdump"]["instructions"] > 400
    assert res["ratio_ours_over_objdump"] > 0


def test_image_bench_compares_the_summary_with_objdump(sample_kernel) -> None:
    """One image: the summary and objdump each counted; the budget follows."""
    res = analysis.bench_image(str(sample_kernel), full=False, rounds=2)
    runs = res["runs"]
    assert res["rounds"] == 2
    assert set(runs) == {"ours", "objdump"}
    assert runs["ours"]["instructions"] > 100
    od = runs["objdump"]
    assert res["budget_2x_seconds"] == round(runs["ours"]["instructions"] / (2 * od["insns_per_second"]), 3)


def test_image_bench_runs_a_tree_before_beside_ours(sample_kernel) -> None:
    """``--before TREE``: that tree's summary runs in the same turns, from a folder of its own, and counts what
    ours counts (here the tree is this checkout itself, whose host library is built already)."""
    tree = REPO
    res = analysis.bench_image(str(sample_kernel), full=False, rounds=1, before=analysis.before_tree(str(tree)))
    runs = res["runs"]
    assert set(runs) == {"ours", "before", "objdump"}
    assert runs["before"]["instructions"] == runs["ours"]["instructions"] > 100
    assert runs["before"]["command"].startswith(f"PYTHONPATH={tree} python -m generator probes")


def test_a_tree_before_must_be_importable(tmp_path: Path) -> None:
    with pytest.raises(analysis.UserError, match="does not import generator from there"):
        analysis.before_tree(str(tmp_path))


def test_startup_is_measured() -> None:
    """Both start-up lines run (``_timed`` raises on a failing command, so a broken import line fails here)
    and give a time.  Which is the longer is not asserted: with bytecode warm the two differ by a few
    milliseconds, less than a loaded machine's jitter, and timings belong in the bench, not in tests."""
    st = analysis.bench_startup()
    assert set(st) == {"python", "python_and_imports"}
    assert st["python"] > 0 and st["python_and_imports"] > 0


def test_capstone_floor_counts_what_the_walk_counts() -> None:
    """On code capstone decodes throughout (libz), its bare decode sees exactly the summary's instructions."""
    from generator.analysis import summary
    from generator.bench import capfloor
    from generator.image.elf import KernelImage
    from helpers.skips import require_system_library

    path = str(require_system_library("libz.so.1"))
    img = KernelImage.open(path)
    walked = sum(r["instructions"] for r in summary.fast_chunk(img, img.functions(), "any", img.isa))
    assert capfloor.count(path) == walked > 5000
