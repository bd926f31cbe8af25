/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kk_dbp.h: the host step the "double breakpoint" ISAs, arm64 and riscv,
 * share (kk_dbp.c), as sys/modules/kinst/dbp/ holds what their kernel
 * parts share.  An instruction's length is the one its encoding announces
 * (the core's kinst_core_length()), which capstone, the decoder of record,
 * must decode it to; its verdict is kinst_core_dissect()'s.  The ISA's
 * step (<arch>/accel/kk_walk.c) gives the hooks below, the fields of its
 * struct kinst_md (kk_isa_fields) and its prologue rule (kk_isa_prologue).
 */

#ifndef KK_DBP_H
#define	KK_DBP_H

#include <capstone/capstone.h>

#include "kk_host.h"

/* capstone's architecture and mode for the ISA. */
extern const cs_arch kk_dbp_arch;
extern const cs_mode kk_dbp_mode;

/*
 * Does the instruction b[0, len) need its whole function's context (a
 * region refusal Python makes: KK_DEFER)?  Does capstone's text agree with
 * the core's metadata and refusal 'rf' of the instruction at 'address'?
 * The row's verdict from 'rf': its reason code, class, direct target and
 * whether it may be cached (KK_R_*).
 */
int	kk_dbp_context(const uint8_t *, size_t);
int	kk_dbp_agrees(const struct kinst_md *, int, uint64_t, const char *,
	    const char *);
void	kk_dbp_verdict(struct kk_row *, int, uint64_t);

/*
 * capstone's mnemonics of each table kind, by kind: a NULL-terminated list,
 * or NULL for a kind without its own (walk.py's MNEMONICS, handed over by
 * kk_dbp_init()); the list of one kind; whether a mnemonic is any kind's.
 */
int	kk_dbp_init(const char *const *const *, unsigned);
const char *const *kk_dbp_mnemonics(unsigned);
int	kk_dbp_any_kind(const char *);

/* Is 's' one of the NULL-terminated 'list' (NULL: none)? */
int	kk_dbp_among(const char *, const char *const *);

#endif
