/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kk_dbp.c: the walk of the "double breakpoint" ISAs (kk_dbp.h) -- one
 * instruction at a time, its length from its encoding, its row from the
 * cache of rows by bytes or from capstone and the core -- and what it
 * hands back to Python (KK_DEFER): bytes capstone cannot decode to the
 * announced length, an instruction that needs its function's context, a
 * function that does not start at an instruction boundary (the walk
 * error is Python's) or whose last instruction runs past its end.
 */

#include <string.h>

#include "kk_dbp.h"

int
kk_dbp_among(const char *s, const char *const *list)
{

	if (list == NULL)
		return (0);	/* a kind without mnemonics of its own */
	for (; *list != NULL; list++)
		if (strcmp(s, *list) == 0)
			return (1);
	return (0);
}

#define	KK_DBP_KINDS	32
static const char *const *kk_dbp_names[KK_DBP_KINDS];
static unsigned kk_dbp_nkinds;

int
kk_dbp_init(const char *const *const *names, unsigned n)
{

	if (n > KK_DBP_KINDS)
		return (-1);
	memcpy(kk_dbp_names, names, n * sizeof(*names));
	kk_dbp_nkinds = n;
	return (0);
}

const char *const *
kk_dbp_mnemonics(unsigned kind)
{

	return (kind < kk_dbp_nkinds ? kk_dbp_names[kind] : NULL);
}

int
kk_dbp_any_kind(const char *mnemonic)
{
	unsigned k;

	for (k = 0; k < kk_dbp_nkinds; k++)
		if (kk_dbp_names[k] != NULL &&
		    kk_dbp_among(mnemonic, kk_dbp_names[k]))
			return (1);
	return (0);
}

int
kk_isa_open(const struct kk_capstone *api, csh *cs)
{

	return (api->kcs_open(kk_dbp_arch, kk_dbp_mode, cs) == CS_ERR_OK ?
	    0 : -1);
}

int
kk_isa_classify(const uint8_t *b, size_t len, uint64_t address,
    const char *mnemonic, const char *operands, struct kk_row *row)
{
	int rf;

	row->kr_len = (uint8_t)len;
	row->kr_flags = 0;
	row->kr_cache = 0;
	row->kr_target = 0;
	row->kr_class = 0;
	row->kr_text = KK_NO_TEXT;
	rf = kinst_core_dissect(b, (kc_uint32_t)len, &row->kr_md);
	if (rf < 0 || !kk_dbp_agrees(&row->kr_md, rf, address, mnemonic,
	    operands))
		return (KK_ERROR);
	kk_dbp_verdict(row, rf, address);
	row->kr_text = kk_text_add(mnemonic, operands, mnemonic);
	return (KK_NEXT);
}

/* The ISA's step (kk_host.h): a function at a misaligned address is Python's. */
int
kk_isa_step(const struct kk_fn *fn, size_t off, struct kk_row *row)
{
	const cs_insn *insn;
	const uint8_t *p;
	size_t ilen;

	if (off == 0 && fn->kn_address % KINST_INSN_ALIGN != 0)
		return (KK_DEFER);
	p = fn->kn_code + off;
	ilen = (size_t)kinst_core_length(p);
	if (ilen == 0 || off + ilen > fn->kn_len || off + ilen > fn->kn_limit ||
	    kk_dbp_context(p, ilen))
		return (KK_DEFER);
	if (kk_cache_get(p, ilen, fn->kn_text != KK_TEXT_NONE, row)) {
		row->kr_off = (uint32_t)off;
		if ((row->kr_flags & KK_R_TARGET) != 0)
			row->kr_target = fn->kn_address + off +
			    (uint64_t)row->kr_md.km_imm;
		return (KK_NEXT);
	}
	if ((insn = kk_decode(fn->kn_code, fn->kn_len, off,
	    fn->kn_address)) == NULL || insn->size != ilen)
		return (KK_DEFER);	/* undecodable: Python says so */
	return (kk_decoded_row(fn->kn_code, off, ilen, fn->kn_address,
	    fn->kn_text, 1, insn->mnemonic, insn->op_str, row));
}
