"""``generate``: render a provider module's sources from templates/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..common.defaults import DEFAULT_PROVIDER
from ..common.errors import UserError
from ..providers import PROVIDER_NAMES, PROVIDERS
from ..providers.contract import add_options, options_given, selection
from ..image import open_kernel


def add_parsers(sub) -> None:
    ge = sub.add_parser("generate", help="render a provider module's C sources from templates/")
    ge.add_argument("--provider", choices=PROVIDER_NAMES, default=DEFAULT_PROVIDER,
                    help=f"which provider (default: {DEFAULT_PROVIDER})")
    ge.add_argument("--kernel", help="kernel image (default: the embedded sample kernel)")
    add_options(ge, tuple(PROVIDERS.values()), "generate")
    ge.add_argument("--out", help="output directory (default: sys/modules/<provider>/)")
    ge.set_defaults(run=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:

    provider = PROVIDERS[args.provider]
    sel = selection(args)
    for other in PROVIDERS.values():
        wrong = [] if other is provider else options_given(other, sel, "generate", (provider,))
        if wrong:
            raise UserError(f"{wrong[0]}; --provider {provider.name} does not take it")
    img = open_kernel(args.kernel)
    done = provider.generate(img, sel, Path(args.out) if args.out else None)
    if done.summary:
        sys.stdout.write(done.summary + "\n")
    for p in done.paths:
        sys.stdout.write(f"{p}\n")
    return 0
