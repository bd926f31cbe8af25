/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_linux_text.c: the text kinst_linux.c fills at load with the jump
 * probes' detours (kinst_core_jump_fill()): KINST_JUMP_CHUNK bytes per
 * chunk, KINST_LINUX_JUMP_SLOTS chunks (kinst_linux_jump.h), int3 until
 * filled, so that a stray jump traps cleanly.  An object of its own because
 * objtool decodes every byte of an executable section one instruction at a
 * time: the default set's 76,000 chunks (15 MB of int3) took it over 3 GB,
 * so Kbuild excludes this file, which holds no code of its own, from
 * objtool (OBJECT_FILES_NON_STANDARD): it gets no ORC data, which the
 * detours cannot have anyway (docs/jump-probes.md, "ORC").
 */

#include <linux/stringify.h>
#include <linux/types.h>

#include "kinst_core.h"
#include "kinst_core_jump.h"
#include "kinst_linux_jump.h"

asm(".pushsection .text.kinst_linux_jump, \"ax\", @progbits\n"
    ".balign 4096\n"
    ".globl kinst_linux_detours\n"
    "kinst_linux_detours:\n"
    ".fill " __stringify(KINST_LINUX_JUMP_SLOTS * KINST_JUMP_CHUNK)
    ", 1, 0xcc\n"
    ".popsection\n");
