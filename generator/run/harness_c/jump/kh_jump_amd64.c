/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_jump_amd64.c: jump probes for the harness (harness --jump), an
 * optional part of the library that generator/run/harness.py compiles in
 * when the table carries jump heads (kt_jump: generator/analysis/
 * jumpplan.py's choice, as in the kernels' tables).  Where the
 * ahead-of-time proof (generator/analysis/jumpsafe.py) says a site may be
 * a jump, and the choice made it a jump head, the probe is a 5-byte
 * "jmp rel32" to a detour instead of int3; every other probe keeps its
 * breakpoint.
 *
 * The detour's layout and fill, the jump's bytes and the live patching
 * protocol are the portable core's (sys/modules/kinst/amd64/
 * kinst_core_jump.[ch]); here is only the harness's part: where the
 * chunks are (after the copy's trampolines, in the same block, each
 * displaced probe's chunk at its own index), the handler that turns the
 * core's frame into the ucontext_t the breakpoint handler gives kh_hit(),
 * and the x87/SSE save (KINST_JUMP_FPU: the handler is compiled C and user
 * code keeps live SSE state).
 *
 * The harness writes every jump while rtld maps the image, before any of
 * its code can run, so the five bytes are written at once; a live kernel
 * follows the core's breakpoint-first protocol (kinst_jump_place[]).
 */

#define	_GNU_SOURCE
#include <sys/types.h>

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <ucontext.h>

#include "kinst_core.h"
#include "kinst_core_jump.h"
#include "kh_isa.h"

/* Per copy: the heads whose detour is filled, by probe (1: ready). */
static uint8_t *kh_jready[KH_MAX_INST];

static kinst_jump_handler_t kh_jump_hit;

/*
 * The detour's probe handler: probe context, as kh_isa_trap() is.  It does
 * what the breakpoint handler does for a hit (count it, kh_hit() with the
 * registers at the probe), minus finding the probe by address: the chunk
 * knows it.
 */
static void
kh_jump_hit(const struct kinst_jframe *f, uint64_t arg, void *fx)
{
	struct kh_inst *ki;
	ucontext_t uc;
	greg_t *gr;
	uint32_t idx;
	int i;

	ki = &kh_insts[arg >> 32];
	idx = (uint32_t)arg;
	__atomic_fetch_add(&kh_hits[idx], 1, __ATOMIC_RELAXED);
	uc.uc_flags = 0;
	uc.uc_link = NULL;
	uc.uc_stack.ss_sp = NULL;
	uc.uc_stack.ss_flags = 0;
	uc.uc_stack.ss_size = 0;
	gr = uc.uc_mcontext.gregs;
	for (i = 0; i < NGREG; i++)
		gr[i] = 0;
	gr[REG_R8] = (greg_t)f->jf_r8;
	gr[REG_R9] = (greg_t)f->jf_r9;
	gr[REG_R10] = (greg_t)f->jf_r10;
	gr[REG_R11] = (greg_t)f->jf_r11;
	gr[REG_R12] = (greg_t)f->jf_r12;
	gr[REG_R13] = (greg_t)f->jf_r13;
	gr[REG_R14] = (greg_t)f->jf_r14;
	gr[REG_R15] = (greg_t)f->jf_r15;
	gr[REG_RDI] = (greg_t)f->jf_rdi;
	gr[REG_RSI] = (greg_t)f->jf_rsi;
	gr[REG_RBP] = (greg_t)f->jf_rbp;
	gr[REG_RBX] = (greg_t)f->jf_rbx;
	gr[REG_RDX] = (greg_t)f->jf_rdx;
	gr[REG_RAX] = (greg_t)f->jf_rax;
	gr[REG_RCX] = (greg_t)f->jf_rcx;
	gr[REG_RSP] = (greg_t)kinst_core_jump_sp(f);
	gr[REG_RIP] = (greg_t)ki->ki_addr[idx];
	gr[REG_EFL] = (greg_t)f->jf_rflags;
	uc.uc_mcontext.fpregs = fx;
	kh_hit(ki->ki_addr[idx] - ki->ki_bias, &uc);
}

size_t
kh_jump_room(uint32_t nprobes)
{

	return ((size_t)nprobes * KINST_JUMP_CHUNK);
}

static uint8_t *
kh_jchunk(const struct kh_inst *ki, uint32_t probe)
{

	return (ki->ki_tramp + (size_t)kinst_table.kt_nprobes *
	    KINST_TRAMP_SIZE + (size_t)probe * KINST_JUMP_CHUNK);
}

/*
 * Fill the chunk of displaced probe 'p' (the head's 'j'-th of 'k'): 0, or
 * nonzero when the core cannot relocate it there.
 */
static int
kh_jfill(struct kh_inst *ki, uint32_t p, uint32_t j, uint32_t k)
{
	uint8_t *c;

	c = kh_jchunk(ki, p);
	return (kinst_core_jump_fill(&ki->ki_md[p], ki->ki_addr[p],
	    (uintptr_t)c, c, j + 1 < k ?
	    (uint64_t)(uintptr_t)kh_jchunk(ki, p + 1) :
	    ki->ki_addr[p] + ki->ki_md[p].km_instlen, j + 1 == k,
	    (uint64_t)(uintptr_t)kh_jump_hit,
	    (uint64_t)(ki - kh_insts) << 32 | p, KINST_JUMP_FPU));
}

/*
 * The detour of head 'p' that the runner chose (kt_jump[p] displaced
 * probes): 1 when filled, 0 when any displaced probe is not ready, the
 * live instructions are not the contiguous run the table says, or one
 * cannot be relocated; the head then keeps its breakpoint.
 */
static int
kh_jdetour(struct kh_inst *ki, uint32_t p)
{
	uint8_t lens[KINST_JUMP_SIZE], jump[KINST_JUMP_SIZE];
	uintptr_t end;
	uint32_t j, k;

	k = kinst_table.kt_jump[p];
	if (k == 0 || k > KINST_JUMP_SIZE || p + k > kinst_table.kt_nprobes)
		return (0);
	end = ki->ki_addr[p];
	for (j = 0; j < k; j++) {
		if (ki->ki_state[p + j] != KH_S_READY ||
		    ki->ki_addr[p + j] != end)
			return (0);
		lens[j] = ki->ki_md[p + j].km_instlen;
		end += lens[j];
	}
	if (kinst_core_jump_window(lens, k) != 0 ||
	    kinst_core_jump_bytes(ki->ki_addr[p],
	    (uintptr_t)kh_jchunk(ki, p), jump) != 0)
		return (0);
	for (j = 0; j < k; j++)
		if (kh_jfill(ki, p + j, j, k) != 0)
			return (0);
	return (1);
}

void
kh_jump_prepare(struct kh_inst *ki)
{
	uint8_t *ready;
	uint32_t p, n;

	n = kinst_table.kt_nprobes;
	if (kinst_table.kt_jump == NULL)
		return;	/* every probe keeps its breakpoint */
	ready = calloc(n, 1);
	if (ready == NULL)
		return;
	for (p = 0; p < n; p++)
		ready[p] = (uint8_t)kh_jdetour(ki, p);
	kh_jready[ki - kh_insts] = ready;
}

/*
 * While rtld maps the image, before any of its code can run: the five
 * bytes at once (a live kernel follows kinst_jump_place[] instead).
 */
uint32_t
kh_jump_place(struct kh_inst *ki, uint32_t probe, uintptr_t live)
{
	const uint8_t *ready;
	volatile uint8_t *b;
	uint32_t j, k;
	uint8_t jump[KINST_JUMP_SIZE];

	ready = kh_jready[ki - kh_insts];
	if (ready == NULL || !ready[probe] || live != ki->ki_addr[probe])
		return (0);
	k = kinst_table.kt_jump[probe];
	for (j = 0; j < k; j++)
		if (ki->ki_state[probe + j] != KH_S_READY)
			return (0);
	if (kinst_core_jump_bytes(live, (uintptr_t)kh_jchunk(ki, probe),
	    jump) != 0)
		return (0);
	/* Ours before the jump can be taken. */
	for (j = 0; j < k; j++)
		__atomic_store_n(&ki->ki_state[probe + j], KH_S_PLACED,
		    __ATOMIC_RELEASE);
	b = (volatile uint8_t *)live;
	for (j = 1; j < KINST_JUMP_SIZE; j++)
		b[j] = jump[j];
	b[0] = jump[0];
	return (k);
}
