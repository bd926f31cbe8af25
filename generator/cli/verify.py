"""``verify-decoder``: our instruction walk against objdump's, on every function of an image."""

from __future__ import annotations

import argparse
import json
import sys

from . import args as A
from ..common.host import progress_wanted


def add_parsers(sub) -> None:
    p = sub.add_parser("verify-decoder", help="check our instruction walk against objdump on every function")
    A.add_kernel(p)
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--max-report", type=int, default=20, help="mismatches to list (default 20)")
    p.set_defaults(run=cmd_verify_decoder)


def cmd_verify_decoder(args: argparse.Namespace) -> int:
    """Run the check; 0 when objdump agrees everywhere, 1 on any mismatch."""
    from ..image import resolve_kernel
    from ..verify.objdump import verify_decoder

    res = verify_decoder(resolve_kernel(args.kernel), max_report=args.max_report,
                         progress=progress_wanted(quiet=args.json))
    if args.json:
        sys.stdout.write(json.dumps(res.to_dict()) + "\n")
    else:
        sys.stdout.write(res.summary() + "\n")
        for m in res.mismatches:
            sys.stdout.write("  " + m.line() + "\n")
        for n in res.notes:
            sys.stdout.write("  note: " + n + "\n")
    return 0 if res.ok else 1
