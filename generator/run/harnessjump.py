"""``harness --jump``: the header that tells the harness's jump part which probes are jumps.

Which are is ``analysis/jumpplan.py``'s choice (``choose``), the same the
kinst module's table carries under ``generate --jump``.

The detour (the core's ``kinst_core_jump_fill()``, called from
``harness_c/jump/kh_jump_amd64.c``) relocates the displaced
instructions with the core's trampoline rule and emulates a last displaced
call with the core's call rule when the call's target is fixed
(the ISA's ``JumpFacts.detour_calls``); a window that ends in any other call keeps its
breakpoint, with a reason.
"""

from __future__ import annotations

from typing import Tuple

from ..analysis.jumpplan import JumpChoice
from ..common.cstring import c_blob
from ..common.errors import UserError

GLUE = "jump"  # the optional folder of harness_c/ compiled in
HEADER = "kinst_harness_jump.h"
TEMPLATE = "harness_jump/kinst_harness_jump.h.j2"


def render(choice: JumpChoice, command: str, inputs) -> Tuple[str, str]:
    """(file name, text) of the generated header, for ``harness.build(generated=...)``."""
    from ..render import c_header, environment

    if max(choice.fires, default=0) > 255:
        raise UserError("--jump: a window of more than 255 probes")  # cannot happen: 5 bytes
    text = environment().get_template(TEMPLATE).render(
        header=c_header(TEMPLATE, inputs, command), probes=len(choice.fires), heads=choice.heads,
        jumped=choice.jumped, blob=c_blob(bytes(choice.fires)))
    return HEADER, text
