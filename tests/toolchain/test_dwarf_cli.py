"""probes --line / --inline / --lines and dscript kinst-line / kinst-inline as users run them.

Output shapes and keys, the D the scripts hold (checked by the D syntax
checker), the one-line errors for bad input, and the cached index's speed.
The answers themselves are held to LLVM's in test_dwarf_oracle.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from generator.dscript.syntax import check
from helpers.dtmalloc_fixtures import assert_one_line_error, dscript, run_cli
from helpers.skips import require_tools

LINE_KEYS = ["function", "offset", "address", "file", "line", "is_stmt", "inlined", "status", "reason", "view", "owns"]
INLINE_KEYS = {"caller", "entry_offset", "return_offsets", "call_file", "call_line", "ranges"}


def _ok(*args: str) -> str:
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _json_lines(*args: str) -> list:
    return [json.loads(line) for line in _ok(*args).splitlines()]


def _curthread_users() -> dict:
    """From the sample kernel's C text, not its DWARF: the functions that use ``curthread`` (the inline
    ``__curthread()``), each with the first line that does; and the line of ``__curthread``'s asm in
    sample.h.  style(9) puts a function's name at the start of its line, followed by ``(``."""
    import re

    from generator.image.sample import SOURCE_DIR

    users = {}
    for src in sorted(SOURCE_DIR.glob("*.c")):
        func = None
        for n, line in enumerate(src.read_text().splitlines(), 1):
            m = re.match(r"^([A-Za-z_]\w*)\(", line)
            if m:
                func = m.group(1)
            elif func and re.search(r"\bcurthread\b", line) and not line.lstrip().startswith("*"):
                users.setdefault(func, n)
    header = (SOURCE_DIR / "sample.h").read_text().splitlines()
    asm = next(n for n, line in enumerate(header, 1) if "movq %%gs:0" in line)
    return {"users": users, "asm_line": asm}


def test_line_json_has_exactly_the_documented_keys(sample_kernel):
    sites = _json_lines("probes", "--line", "vm_fault.c:186", "--json")
    assert len(sites) >= 2 and all(list(s) == LINE_KEYS for s in sites)
    assert {s["function"] for s in sites} == {"vm_fault"}
    assert all(s["file"].endswith("/samples/kernel/vm_fault.c") and s["line"] == 186 for s in sites)
    assert all(s["status"] == "ok" and s["reason"] == "" and s["inlined"] == [] for s in sites)
    assert sorted(s["address"] for s in sites) == [s["address"] for s in sites]


def test_line_text_names_the_probes(sample_kernel):
    out = _ok("probes", "--line", "kernel/vm_fault.c:186").splitlines()
    assert out[0].endswith("vm_fault.c:186: 4 sites in 1 function, 4 traceable"), out[0]
    assert all(line.startswith("kinst::vm_fault:") for line in out[1:5])


def test_line_inside_an_inlined_copy(sample_kernel):
    """A line of the inline __curthread (sample.h) has a site in every function it is inlined into."""
    want = _curthread_users()
    sites = _json_lines("probes", "--line", f"sample.h:{want['asm_line']}", "--json")
    assert all(s["inlined"] == ["__curthread"] for s in sites), sites
    assert sorted(s["function"] for s in sites) == sorted(want["users"])


def test_line_on_a_refused_function_carries_its_verdict(sample_kernel):
    """dtrace_probe is on kinst's exclusion list: its sites are listed, refused, with the reason probes gives."""
    fn = _json_lines("probes", "--function", "dtrace_probe", "--lines", "--json")
    assert fn and all(s["status"] == "skip" and "excluded by name" in s["reason"] for s in fn)


def test_function_lines_lists_source_with_offsets(sample_kernel):
    out = _ok("probes", "--function", "vm_fault", "--lines").splitlines()
    assert out[0].startswith("<vm_fault@") and out[0].split()[0].endswith("/samples/kernel/vm_fault.c>")
    assert any(line.split()[:2] == ["162", "0"] for line in out), out[:8]
    assert any(line.split()[:1] == ["186"] and len(line.split()) >= 5 for line in out)
    assert any("vm_fault(vm_map_t map" in line for line in out)  # the source text, as perf probe -L shows


def test_inline_json_has_the_documented_keys(sample_kernel):
    copies = _json_lines("probes", "--inline", "__curthread", "--json")
    assert all(INLINE_KEYS <= set(c) for c in copies)
    assert sorted((c["caller"], c["call_line"]) for c in copies) == sorted(_curthread_users()["users"].items())
    for c in copies:
        lo, hi = c["ranges"][0]
        assert c["entry_offset"] == c["sites"][0]["offset"] and c["sites"][0]["address"] == lo < hi
        assert c["return_offsets"] and c["call_file"].endswith(".c") and c["call_line"] > 0
    assert {c["caller"] for c in copies} >= {"critical_enter", "spinlock_enter", "trap"}


def test_inline_reports_the_out_of_line_definition(lua_gcc):
    copies = _json_lines("probes", "--kernel", str(lua_gcc), "--inline", "luaH_getshortstr", "--json")
    outs = [c for c in copies if c["caller"] is None]
    inlined = [c for c in copies if c["caller"] is not None]
    assert len(outs) == 1 and outs[0]["symbol"] == "luaH_getshortstr" and outs[0]["provider"] == "fbt"
    assert outs[0]["call_file"] is None and outs[0]["return_offsets"] == []
    assert len(inlined) >= 2 and {c["caller"] for c in inlined} >= {"luaH_get", "luaH_getstr"}
    # A copy split in several ranges has a return at the end of each range.
    split = [c for c in inlined if len([r for r in c["ranges"] if r[0] < r[1]]) > 1]
    assert split and all(len(c["sites"]) == 1 + len([r for r in c["ranges"] if r[0] < r[1]]) for c in split)


def test_lines_and_inline_on_the_debian_image(lua_gcc, lua_clang):
    for image in (lua_gcc, lua_clang):
        sites = _json_lines("probes", "--kernel", str(image), "--line", "lvm.c:1200", "--json")
        assert sites and all(s["function"] == "luaV_execute" for s in sites)
        text = _ok("probes", "--kernel", str(image), "--function", "luaH_get", "--lines")
        assert text.startswith("<luaH_get@") and "luaH_get (Table *t, const TValue *key)" in text


# -- D scripts ------------------------------------------------------------------


def test_dscript_kinst_line(sample_kernel):
    text = dscript("kinst-line", "vm_fault.c:186")
    assert check(text) == 5  # four sites and END
    assert text.count("\nkinst::vm_fault:") == 4
    from generator.image.elf import KernelImage

    assert f"build-id {KernelImage.open(str(sample_kernel)).build_id}" in text


def test_dscript_kinst_inline(lua_gcc):
    text = dscript("kinst-inline", "luaH_getshortstr", "--kernel", str(lua_gcc))
    clauses = check(text)
    copies = _json_lines("probes", "--kernel", str(lua_gcc), "--inline", "luaH_getshortstr", "--json")
    ok_sites = [s for c in copies for s in c["sites"] if s["status"] == "ok"]
    assert clauses == len(ok_sites) + 2 + 1  # one per kinst site, fbt entry and return, END
    assert "\nfbt::luaH_getshortstr:entry\n" in text and "\nfbt::luaH_getshortstr:return\n" in text
    for s in ok_sites:
        assert f"\nkinst::{s['function']}:{s['offset']}\n" in text


def test_dscript_refuses_a_line_kinst_cannot_trace(sample_kernel):
    assert_one_line_error(run_cli("dscript", "kinst-line", "dtrace.c:60"), "kinst can trace none of its")


def test_dscript_needs_its_target(sample_kernel):
    assert_one_line_error(run_cli("dscript", "kinst-line"), "kinst-line needs FILE:LINE")
    assert_one_line_error(run_cli("dscript", "kinst-trace", "vm_fault.c:1", "--function", "vm_fault"),
                          "takes no FILE:LINE")


# -- bad input: one line, exit 2 ------------------------------------------------------


def test_line_without_code_names_the_nearest_lines(sample_kernel):
    line = assert_one_line_error(run_cli("probes", "--line", "vm_fault.c:164"), "vm_fault.c:164 has no code")
    assert line.endswith("nearest lines with code: 162 and 169"), line


def test_unknown_and_ambiguous_files(sample_kernel):
    assert_one_line_error(run_cli("probes", "--line", "nosuch.c:1"), "no source file 'nosuch.c'")
    assert_one_line_error(run_cli("probes", "--line", "vm_fault.c"), "expected FILE:LINE")


def test_inline_never_inlined_says_it_exists_out_of_line(sample_kernel):
    assert_one_line_error(run_cli("probes", "--inline", "vm_fault"),
                          "vm_fault is never inlined; it exists only out of line, as vm_fault")
    assert_one_line_error(run_cli("probes", "--inline", "no_such_function"), "no function no_such_function")


def test_no_debug_info_says_where_it_looked(sample_kernel, tmp_path):
    require_tools("objcopy", why="strips the sample kernel's DWARF")
    stripped = tmp_path / "kernel"
    subprocess.run(["objcopy", "--strip-debug", str(sample_kernel), str(stripped)], check=True)
    line = assert_one_line_error(run_cli("probes", "--kernel", str(stripped), "--line", "vm_fault.c:186"),
                                 "no debug info; looked in")
    assert "/usr/lib/debug/.build-id/" in line and f"/usr/lib/debug{stripped}.debug" in line


def test_debug_file_of_another_image_is_refused(sample_kernel, lua_gcc):
    assert_one_line_error(run_cli("probes", "--line", "vm_fault.c:186", "--debug", str(lua_gcc)),
                          "build-id mismatch")


def test_modes_do_not_mix(sample_kernel):
    assert_one_line_error(run_cli("probes", "--lines"), "--lines lists one function's source")
    assert_one_line_error(run_cli("probes", "--line", "vm_fault.c:186", "--offset", "4"), "--offset and --summary")
    assert_one_line_error(run_cli("probes", "--debug", "x"), "--debug is for --line")


# -- the cached index ---------------------------------------------------------------


def test_later_queries_answer_well_under_a_second(lua_gcc, tmp_path):
    """The DWARF is read once; loading what a query needs and answering it then takes a fraction of a second."""
    from generator.analysis.indexcache import cache_path, open_index, open_source
    from generator.analysis.inlines import inline_copies
    from generator.analysis.lines import line_sites
    from generator.image.elf import KernelImage

    img = KernelImage.open(str(lua_gcc))
    open_index(img, cache_dir=tmp_path)
    assert (cache_path(img.build_id, tmp_path) / "units.dir").is_file()
    t0 = time.perf_counter()
    img = KernelImage.open(str(lua_gcc))
    src = open_source(img, cache_dir=tmp_path)
    assert line_sites(img, src.for_line("lvm.c", 1200), "lvm.c:1200")
    assert inline_copies(img, src.for_all(lines=False), "luaH_getshortstr")
    assert time.perf_counter() - t0 < 0.5


def _entries(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_corrupt_cache_file_is_rebuilt(sample_kernel, tmp_path):
    from generator.analysis.indexcache import cache_path, open_index
    from generator.image.elf import KernelImage

    img = KernelImage.open(str(sample_kernel))
    first, _ = open_index(img, cache_dir=tmp_path)
    folder = cache_path(img.build_id, tmp_path)
    before = _entries(folder)
    assert "units.dir" in before and any(n.endswith(".lines") for n in before) and any(
        n.endswith(".dies") for n in before)
    for name in before:
        data = bytearray(before[name])
        data[-3] ^= 0xFF
        (folder / name).write_bytes(bytes(data))
    again, _ = open_index(img, cache_dir=tmp_path)
    assert again.counts() == first.counts() and _entries(folder) == before


def test_a_corrupt_copy_with_the_same_build_id_is_read_again(sample_kernel, tmp_path):
    """The cache is filed under the build-id, but an entry is used only while the bytes it was read from are
    the same: a copy damaged inside the DWARF a query reads is read again (and found corrupt), not answered
    from the clean file's entries."""
    from generator.analysis.indexcache import cache_path, open_source
    from generator.analysis.lines import line_sites
    from generator.common.errors import UserError
    from generator.image.elf import KernelImage

    img = KernelImage.open(str(sample_kernel))
    src = open_source(img, cache_dir=tmp_path)
    sites = line_sites(img, src.for_line("vm_fault.c", 186), "vm_fault.c:186")
    assert sites
    copy = tmp_path / "copy"
    data = bytearray(Path(sample_kernel).read_bytes())
    offset = data.find(bytes(img.section_view(".debug_line")[0][:64]))
    assert offset > 0
    data[offset + 4] = 0x09  # the first line program's version: 9, which no DWARF has
    copy.write_bytes(bytes(data))
    bad = KernelImage.open(str(copy))
    assert bad.build_id == img.build_id and cache_path(bad.build_id, tmp_path).is_dir()
    with pytest.raises(UserError, match="version 9"):
        open_source(bad, cache_dir=tmp_path).for_line("vm_fault.c", 186)
    # and the clean file still answers from its entries
    again = line_sites(img, open_source(img, cache_dir=tmp_path).for_line("vm_fault.c", 186), "vm_fault.c:186")
    assert again == sites
