/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.c: table lookup, trampoline fill and call emulation over a
 * register file, for amd64.  Freestanding C99, no headers, no library
 * calls: the kernel glue runs this in probe context and the user-space
 * harness in a SIGTRAP handler, and neither may call into code that could
 * itself be probed (kinst's kinst_memcpy() rule).  Hence the byte loop below
 * instead of memcpy(), and no structure assignment a compiler could turn
 * into one.
 */

#include "kinst_core.h"

#define	KINST_INT32_MIN	(-(kc_int64_t)0x80000000)
#define	KINST_INT32_MAX	((kc_int64_t)0x7fffffff)

void
kinst_core_bytecopy(volatile kc_uint8_t *dst, const volatile kc_uint8_t *src,
    kc_uint32_t len)
{
	while (len-- > 0)
		*dst++ = *src++;
}

/*
 * Find the entry for a patch point, given as a link-time address (the live
 * address minus the image's load bias).  Functions are sorted by address and
 * each function's entries by offset, so both searches are binary: O(log n).
 * Returns the entry index or -1.
 */
long
kinst_core_lookup(const struct kinst_table *kt, kc_uint64_t addr)
{
	const struct kinst_func *kf;
	kc_uint32_t lo, hi, mid, off;

	lo = 0;
	hi = kt->kt_nfuncs;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (kt->kt_funcs[mid].kf_addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return (-1);
	kf = &kt->kt_funcs[lo - 1];
	if (addr - kf->kf_addr >= kf->kf_size)
		return (-1);
	off = (kc_uint32_t)(addr - kf->kf_addr);
	lo = kf->kf_first;
	hi = kf->kf_first + kf->kf_count;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (kt->kt_entries[mid].ke_off == off)
			return ((long)mid);
		if (kt->kt_entries[mid].ke_off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (-1);
}

/*
 * Before any patch, the live bytes must be the ones the table was made from;
 * otherwise the image is not the one analysed and the probe is refused.
 */
int
kinst_core_check(const struct kinst_entry *ke, const volatile kc_uint8_t *live)
{
	kc_uint32_t i;

	for (i = 0; i < ke->ke_instlen; i++) {
		if (live[i] != ke->ke_orig[i])
			return (KINST_E_BYTES);
	}
	return (0);
}

int
kinst_core_is_call(const struct kinst_entry *ke)
{

	return ((ke->ke_flags & KINST_F_CALL) != 0);
}

static void
kinst_core_put32(volatile kc_uint8_t *p, kc_uint32_t v)
{

	p[0] = (kc_uint8_t)v;
	p[1] = (kc_uint8_t)(v >> 8);
	p[2] = (kc_uint8_t)(v >> 16);
	p[3] = (kc_uint8_t)(v >> 24);
}

/*
 * Fill a KINST_TRAMP_SIZE trampoline at 'tramp' for the instruction at
 * 'patchpoint': the template, its rel32 rewritten so that it reaches the same
 * absolute target from the trampoline, then "jmp *0(%rip)" and the address
 * of the next original instruction.  The rest is int3 so that a stray jump
 * into the tail traps cleanly.  Widened short jumps need no special case here:
 * their template already holds the rel32 opcode and ke_disp was adjusted for
 * the longer instruction.
 */
int
kinst_core_tramp_fill(const struct kinst_entry *ke, kc_uintptr_t patchpoint,
    volatile kc_uint8_t *tramp)
{
	kc_uint64_t resume;
	kc_int64_t rel;
	kc_uint32_t i, len;

	if (kinst_core_is_call(ke))
		return (KINST_E_KIND);
	len = ke->ke_tinstlen;
	kinst_core_bytecopy(tramp, ke->ke_template, len);
	if ((ke->ke_flags & KINST_F_RIPREL) != 0) {
		rel = (kc_int64_t)(patchpoint + (kc_uint64_t)ke->ke_disp -
		    (kc_uint64_t)(kc_uintptr_t)tramp);
		if (rel < KINST_INT32_MIN || rel > KINST_INT32_MAX)
			return (KINST_E_RANGE);
		kinst_core_put32(tramp + ke->ke_dispoff, (kc_uint32_t)rel);
	}
	tramp[len + 0] = 0xff;
	tramp[len + 1] = 0x25;
	kinst_core_put32(tramp + len + 2, 0);
	resume = patchpoint + ke->ke_instlen;
	kinst_core_put32(tramp + len + 6, (kc_uint32_t)resume);
	kinst_core_put32(tramp + len + 10, (kc_uint32_t)(resume >> 32));
	for (i = len + 14; i < KINST_TRAMP_SIZE; i++)
		tramp[i] = KINST_PATCHVAL;
	return (0);
}

static kc_uint64_t
kinst_core_reg(const struct kinst_regs *kr, int reg)
{

	return (reg < 0 ? 0 : kr->kr_gpr[reg & 15]);
}

static kc_uint64_t
kinst_core_load64(kc_uint64_t addr)
{

	return (*(const volatile kc_uint64_t *)(kc_uintptr_t)addr);
}

/*
 * Emulate a call: compute where it goes and what it would push.  The glue
 * pushes '*retaddr' and sets %rip to '*target' in its own frame (in the
 * kernel, dtrace_invop_start's scratch slot and bp_call do the push).
 * Register operands use the values at the breakpoint, %rsp before the push,
 * exactly what the call itself would have used.
 */
int
kinst_core_call(const struct kinst_entry *ke, kc_uintptr_t patchpoint,
    const struct kinst_regs *kr, kc_uint64_t *target, kc_uint64_t *retaddr)
{
	kc_uint64_t next, ea;

	next = patchpoint + ke->ke_instlen;
	ea = kinst_core_reg(kr, ke->ke_reg1) +
	    (kinst_core_reg(kr, ke->ke_reg2) << ke->ke_scale) +
	    (kc_uint64_t)ke->ke_disp;
	switch (ke->ke_kind) {
	case KINST_K_CALL_DIRECT:
		*target = next + (kc_uint64_t)ke->ke_disp;
		break;
	case KINST_K_CALL_RIPREL:
		*target = kinst_core_load64(next + (kc_uint64_t)ke->ke_disp);
		break;
	case KINST_K_CALL_REG:
		*target = ea;
		break;
	case KINST_K_CALL_MEM:
		*target = kinst_core_load64(ea);
		break;
	default:
		return (KINST_E_KIND);
	}
	*retaddr = next;
	return (0);
}
