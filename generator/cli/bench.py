"""``bench``: the benchmarks, with their results written to ``bench/results/``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..common.paths import BENCH_RESULTS, REPO


def add_parsers(sub) -> None:
    be = sub.add_parser("bench", help="time whole-image analysis against objdump -d on the same image, "
                        "harness hits against a bare trap, the stand-in VM's cycle, and the source-line and "
                        "inline index (build and query) against LLVM's tools")
    be.add_argument("--image", help="image with >= 20 MiB of text (default: the largest libLLVM here)")
    be.add_argument("--out", default=str(BENCH_RESULTS.relative_to(REPO)),
                    help="results directory (default: bench/results)")
    be.add_argument("--with-vmlinux", action="store_true", help="fetch Debian's kernel debug package (about 860 MB) "
                    "once, to measure a real kernel image too")
    be.add_argument("--before", metavar="TREE", help="another kinstkit source tree (git archive REV | tar -x -C "
                    "TREE) whose summary and full JSON the analysis benchmark times beside ours")
    be.add_argument("--skip-harness", action="store_true", help="skip the harness benchmark")
    be.add_argument("--skip-vm", action="store_true", help="skip the VM benchmarks (stand-in cycle, Linux guest)")
    be.add_argument("--skip-ring0", action="store_true",
                    help="skip the Linux guest's runs (vm-test --guest linux beside an unprobed boot)")
    be.add_argument("--ring0-ladder", action="store_true",
                    help="also arm larger and larger function sets in the Linux guest until a run takes more than "
                    "10 minutes (about half an hour)")
    be.add_argument("--skip-dwarf", action="store_true", help="skip the source-line and inline index benchmark")
    be.add_argument("--dwarf-image", help="image with DWARF for that benchmark (default: the largest the tests "
                    "build, Lua 5.4 from its Debian source package)")
    be.add_argument("--skip-arch", action="store_true",
                    help="skip the ISAs that run under qemu-user here (analysis against the cross objdump, harness hits under qemu-user)")
    be.set_defaults(run=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from ..bench.analysis import bench_analysis

    out = Path(args.out)
    res = bench_analysis(args.image, out, with_vmlinux=args.with_vmlinux, before=args.before)
    sys.stdout.write((out / "analysis.md").read_text() + "\n")
    if not args.skip_harness:
        from ..bench.harness import bench_harness

        bench_harness(out)
        sys.stdout.write((out / "harness.md").read_text() + "\n")
    if not args.skip_vm:
        from ..bench.vm import bench_vm

        bench_vm(out, ring0=not args.skip_ring0, ladder=args.ring0_ladder)
        sys.stdout.write((out / "vm.md").read_text() + "\n")
    if not args.skip_dwarf:
        from ..bench.dwarf import bench_dwarf

        bench_dwarf(out, args.dwarf_image)
        sys.stdout.write((out / "dwarf.md").read_text() + "\n")
    if not args.skip_arch:
        from ..bench.arch import bench_arch

        bench_arch(out)
        sys.stdout.write((out / "arch.md").read_text())
    return 0 if all(im["runs"]["ours"]["instructions"] for im in res["images"]) else 1
