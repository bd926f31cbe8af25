"""``sample``: build the embedded sample kernel and print its path."""

from __future__ import annotations

import argparse
import sys


def add_parsers(sub) -> None:
    sa = sub.add_parser("sample", help="build the embedded sample kernel and print its path")
    sa.add_argument("--rebuild", action="store_true", help="rebuild even when the cached image is current")
    sa.add_argument("--release", default=None,
                    help="the FreeBSD release whose constants (osreldate, M_VERSION) it carries: 14.3 (default, or "
                         "$KINSTKIT_SAMPLE_RELEASE) or 15.0")
    sa.set_defaults(run=cmd_sample)


def cmd_sample(args: argparse.Namespace) -> int:
    from ..image.sample import sample_kernel

    sys.stdout.write(f"{sample_kernel(rebuild=args.rebuild, release=args.release)}\n")
    return 0
