"""The kinst provider: a probe on every instruction kinst can trace, with tables computed ahead of time.

- ``generate``: analysis -> plan -> the generated sources of ``sys/modules/kinst/``.

``PROVIDER`` is its record for the build stage and the command line
(``providers.contract.Provider``): the hand-written C of the module
directory (the machine-independent files and each ISA's folders, named by
``Isa.kmod.kinst_dirs``), its options, and how it renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from ... import isa as isa_registry
from ...common.defaults import DEFAULT_FUNCTION, DEFAULT_PROLOGUE_RULE, PROLOGUE_RULE_HELP, PROLOGUE_RULES
from ...common.paths import SYS_MODULES, TEMPLATE_DIR
from ..contract import Generated, Provider, ProviderOption, Selection

if TYPE_CHECKING:
    from ...image.elf import KernelImage

NAME = "kinst"
MODULE_DIR = SYS_MODULES / NAME


def _rendered() -> Tuple[str, ...]:
    """What ``generate`` writes into the module directory: the templates' names without ``.j2``."""
    return tuple(sorted(p.name[: -len(".j2")] for p in (TEMPLATE_DIR / NAME).glob("*.j2")))


def _c_files(folder: str) -> Tuple[str, ...]:
    """The hand-written C and headers of ``folder`` of the module directory ("" for the top)."""
    base = MODULE_DIR / folder
    generated = set(_rendered())
    return tuple(str(p.relative_to(MODULE_DIR)) for p in sorted(base.glob("*.[ch]")) if p.name not in generated)


def _plain() -> Tuple[str, ...]:
    """The top folder's C (the machine-independent glue) and every ISA's folders."""
    folders = dict.fromkeys(d for n in isa_registry.SUPPORTED for d in isa_registry.by_name(n).kmod.kinst_dirs)
    return (*_c_files(""), *(f for d in folders for f in _c_files(d)))


def _portable(target: str) -> Tuple[str, ...]:
    """What compiles without kernel headers for ``target``: the table reader, each of the ISA's folders'
    ``kinst_core*.c`` (``dbp/kinst_core_dbp.c`` beside arm64's and riscv's own), the tables."""
    cores = (f for d in isa_registry.by_name(target).kmod.kinst_dirs for f in _c_files(d)
             if Path(f).name.startswith("kinst_core") and f.endswith(".c"))
    return ("kinst_funcs.c", *cores, "kinst_table.c", "kinst_target.c")


def _includes(target: str) -> Tuple[str, ...]:
    return (".", *isa_registry.by_name(target).kmod.kinst_dirs)


def _generate(img: "KernelImage", sel: Selection, out: Optional[Path]) -> Generated:
    from . import generate

    functions = sel.functions or (() if sel.all_functions else (DEFAULT_FUNCTION,))
    plan, paths, choice = generate.generate(img, functions, sel.all_functions, out,
                                            sel.prologue_rule or DEFAULT_PROLOGUE_RULE, sel.jump)
    jumps = "" if choice is None else f", {choice.heads} jump heads firing {choice.jumped} probes"
    return Generated(tuple(paths), f"{plan.nprobes} probes in {len(plan.funcs)} functions, "
                                  f"{len(plan.refused)} refused{jumps}")


def _stamp(sel: Selection) -> Dict[str, object]:
    return {"functions": list(sel.functions), "all": sel.all_functions,
            "prologue_rule": sel.prologue_rule or DEFAULT_PROLOGUE_RULE, "jump": sel.jump}


PROVIDER = Provider(
    name=NAME,
    plain=_plain,
    portable=_portable,
    includes=_includes,
    table="kinst_table.c",
    options=(
        ProviderOption("--function", "functions", f"a function to table (repeatable; default: {DEFAULT_FUNCTION})",
                       "append", group="functions", metavar="F"),
        ProviderOption("--all", "all_functions", "every eligible function", "flag", group="functions"),
        ProviderOption("--prologue-rule", "prologue_rule", PROLOGUE_RULE_HELP, "value", choices=PROLOGUE_RULES),
        ProviderOption("--jump", "jump", "the table says which probes may be jumps (the proof of probes --jump, on ISAs "
                       "with jump facts; about 20 CPU-s on a large image); the module places them only "
                       "with debug.kinst.jump=1", "flag"),
    ),
    generate=_generate,
    stamp=_stamp,
)
