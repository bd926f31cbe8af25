/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_jump_amd64.c: jump probes for the harness (harness --jump), an
 * optional part of the library that generator/run/harness.py compiles in
 * with the generated kinst_harness_jump.h.  Where the ahead-of-time proof
 * (generator/analysis/jumpsafe.py) says a site may be a jump, and the
 * runner chose it as a jump head, the probe is a 5-byte "jmp rel32" to a
 * detour instead of int3; every other probe keeps its breakpoint.
 *
 * The detour of a head that displaces probes p .. p + k - 1 (the proof:
 * nothing enters the displaced bytes but at p) is k chunks, one per
 * displaced instruction, each KH_JCHUNK bytes at the probe's own place
 * after the copy's trampolines, in the same block:
 *
 *   [kh_jstub: save, call kh_jump_hit(probe), restore]
 *   [the instruction relocated by kinst_core_tramp_fill_to(), resuming at
 *    the next chunk, or for the last one after the displaced bytes -- or,
 *    a last direct call, emulated with kinst_core_call()'s target and
 *    return address: kh_jcall]
 *
 * so each displaced probe fires just before its own instruction runs, and
 * a taken branch among them leaves the detour as the original would have
 * left the window: one hit per instruction executed, as the breakpoints
 * count.  The stub steps over the red zone (user code may keep data below
 * %rsp), saves every general register and %rflags, clears DF, aligns the
 * stack, saves the x87/SSE state (fxsave64: the handler is compiled C),
 * and hands the handler the registers as kinst's regs view, a ucontext_t
 * like the breakpoint handler's.
 *
 * The harness writes every jump while rtld maps the image, before any of
 * its code can run, so the five bytes are written at once.  A live kernel
 * needs issue 22's breakpoint-first patching protocol instead.
 */

#define	_GNU_SOURCE
#include <sys/types.h>

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <ucontext.h>

#include "kinst_core.h"
#include "kh_isa.h"
#include "kinst_harness_jump.h"

#define	KH_JCHUNK	192		/* bytes of detour per probe */
#define	KH_JMP_SIZE	5		/* jmp rel32 */
#define	KH_JMP_OP	0xe9

/*
 * The stub and the call emulation, assembled (never run here: .rodata)
 * and copied into each chunk; the immediates each template's labels end
 * are filled per chunk.
 */
__asm__(
"	.pushsection .rodata\n"
"	.globl	kh_jstub, kh_jstub_arg, kh_jstub_fn, kh_jstub_end\n"
"	.hidden	kh_jstub, kh_jstub_arg, kh_jstub_fn, kh_jstub_end\n"
"	.globl	kh_jcall, kh_jcall_lo, kh_jcall_hi, kh_jcall_end\n"
"	.hidden	kh_jcall, kh_jcall_lo, kh_jcall_hi, kh_jcall_end\n"
"kh_jstub:\n"
"	leaq	-128(%rsp), %rsp\n"
"	pushfq\n"
"	pushq	%rax\n"
"	pushq	%rcx\n"
"	pushq	%rdx\n"
"	pushq	%rbx\n"
"	pushq	%rbp\n"
"	pushq	%rsi\n"
"	pushq	%rdi\n"
"	pushq	%r8\n"
"	pushq	%r9\n"
"	pushq	%r10\n"
"	pushq	%r11\n"
"	pushq	%r12\n"
"	pushq	%r13\n"
"	pushq	%r14\n"
"	pushq	%r15\n"
"	cld\n"
"	movq	%rsp, %rdi\n"
"	movq	%rsp, %rbx\n"
"	andq	$-16, %rsp\n"
"	subq	$512, %rsp\n"
"	fxsave64 (%rsp)\n"
"	movq	%rsp, %rdx\n"
"	movabsq	$0, %rsi\n"
"kh_jstub_arg:\n"
"	movabsq	$0, %rax\n"
"kh_jstub_fn:\n"
"	callq	*%rax\n"
"	fxrstor64 (%rsp)\n"
"	movq	%rbx, %rsp\n"
"	popq	%r15\n"
"	popq	%r14\n"
"	popq	%r13\n"
"	popq	%r12\n"
"	popq	%r11\n"
"	popq	%r10\n"
"	popq	%r9\n"
"	popq	%r8\n"
"	popq	%rdi\n"
"	popq	%rsi\n"
"	popq	%rbp\n"
"	popq	%rbx\n"
"	popq	%rdx\n"
"	popq	%rcx\n"
"	popq	%rax\n"
"	popfq\n"
"	leaq	128(%rsp), %rsp\n"
"kh_jstub_end:\n"
"kh_jcall:\n"
"	leaq	-8(%rsp), %rsp\n"
"	movl	$0, (%rsp)\n"
"kh_jcall_lo:\n"
"	movl	$0, 4(%rsp)\n"
"kh_jcall_hi:\n"
"	jmp	*0(%rip)\n"
"	.quad	0\n"
"kh_jcall_end:\n"
"	.popsection\n");

extern const uint8_t kh_jstub[], kh_jstub_arg[], kh_jstub_fn[],
    kh_jstub_end[];
extern const uint8_t kh_jcall[], kh_jcall_lo[], kh_jcall_hi[],
    kh_jcall_end[];

/* What kh_jstub pushed, lowest address first. */
struct kh_jframe {
	uint64_t	jf_r15, jf_r14, jf_r13, jf_r12, jf_r11, jf_r10, jf_r9;
	uint64_t	jf_r8, jf_rdi, jf_rsi, jf_rbp, jf_rbx, jf_rdx, jf_rcx;
	uint64_t	jf_rax, jf_rflags;
};

/* Per copy: the heads whose detour is filled, by probe (1: ready). */
static uint8_t *kh_jready[KH_MAX_INST];

void	kh_jump_hit(const struct kh_jframe *, uint64_t, void *);

/*
 * The detour's probe handler: probe context, as kh_isa_trap() is.  It does
 * what the breakpoint handler does for a hit (count it, kh_hit() with the
 * registers at the probe), minus finding the probe by address: the chunk
 * knows it.
 */
void
kh_jump_hit(const struct kh_jframe *f, uint64_t arg, void *fx)
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
	gr[REG_RSP] = (greg_t)((uintptr_t)(f + 1) + 128);
	gr[REG_RIP] = (greg_t)ki->ki_addr[idx];
	gr[REG_EFL] = (greg_t)f->jf_rflags;
	uc.uc_mcontext.fpregs = fx;
	kh_hit(ki->ki_addr[idx] - ki->ki_bias, &uc);
}

size_t
kh_jump_room(uint32_t nprobes)
{

	return ((size_t)nprobes * KH_JCHUNK);
}

static void
kh_jput64(uint8_t *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void
kh_jput32(uint8_t *p, uint32_t v)
{
	int i;

	for (i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint8_t *
kh_jchunk(const struct kh_inst *ki, uint32_t probe)
{

	return (ki->ki_tramp + (size_t)kinst_table.kt_nprobes *
	    KINST_TRAMP_SIZE + (size_t)probe * KH_JCHUNK);
}

/*
 * Fill the chunk of displaced probe 'p' (the head's 'j'-th of 'k'): 0, or
 * -1 when the core cannot relocate it there.
 */
static int
kh_jfill(struct kh_inst *ki, uint32_t p, uint32_t j, uint32_t k)
{
	const struct kinst_md *md;
	struct kinst_regs kr;
	uint64_t target, retaddr;
	uint8_t *c, *insn;
	size_t stub;
	uint32_t i;

	c = kh_jchunk(ki, p);
	md = &ki->ki_md[p];
	stub = (size_t)(kh_jstub_end - kh_jstub);
	for (i = 0; i < KH_JCHUNK; i++)
		c[i] = KINST_PATCHVAL;
	for (i = 0; i < stub; i++)
		c[i] = kh_jstub[i];
	kh_jput64(c + (kh_jstub_arg - kh_jstub) - 8,
	    (uint64_t)(ki - kh_insts) << 32 | p);
	kh_jput64(c + (kh_jstub_fn - kh_jstub) - 8,
	    (uint64_t)(uintptr_t)kh_jump_hit);
	insn = c + stub;
	if (!kinst_core_is_call(md))
		return (kinst_core_tramp_fill_to(md, ki->ki_addr[p],
		    (uintptr_t)insn, insn, j + 1 < k ?
		    (uint64_t)(uintptr_t)kh_jchunk(ki, p + 1) :
		    ki->ki_addr[p] + md->km_instlen));
	/* A call: only the last, and only one whose target is fixed. */
	if (j + 1 != k || md->km_kind != KINST_K_CALL_DIRECT)
		return (-1);
	for (i = 0; i < sizeof(kr.kr_gpr) / sizeof(kr.kr_gpr[0]); i++)
		kr.kr_gpr[i] = 0;
	kr.kr_rip = ki->ki_addr[p];
	kr.kr_rflags = 0;
	if (kinst_core_call(md, ki->ki_addr[p], &kr, &target, &retaddr) != 0)
		return (-1);
	for (i = 0; i < (size_t)(kh_jcall_end - kh_jcall); i++)
		insn[i] = kh_jcall[i];
	kh_jput32(insn + (kh_jcall_lo - kh_jcall) - 4, (uint32_t)retaddr);
	kh_jput32(insn + (kh_jcall_hi - kh_jcall) - 4,
	    (uint32_t)(retaddr >> 32));
	kh_jput64(insn + (kh_jcall_end - kh_jcall) - 8, target);
	return (0);
}

/*
 * The detour of head 'p' that the runner chose (kh_jump_n[p] displaced
 * probes): 1 when filled, 0 when any displaced probe is not ready, the
 * live instructions are not the contiguous run the table says, or one
 * cannot be relocated; the head then keeps its breakpoint.
 */
static int
kh_jdetour(struct kh_inst *ki, uint32_t p)
{
	uintptr_t end, live;
	int64_t rel;
	uint32_t j, k;

	k = kh_jump_n[p];
	if (k == 0 || p + k > kinst_table.kt_nprobes)
		return (0);
	live = ki->ki_addr[p];
	end = live;
	for (j = 0; j < k; j++) {
		if (ki->ki_state[p + j] != KH_S_READY ||
		    ki->ki_addr[p + j] != end)
			return (0);
		end += ki->ki_md[p + j].km_instlen;
	}
	if (end - live < KH_JMP_SIZE ||
	    end - ki->ki_md[p + k - 1].km_instlen >= live + KH_JMP_SIZE)
		return (0);
	rel = (int64_t)((uintptr_t)kh_jchunk(ki, p) - (live + KH_JMP_SIZE));
	if (rel != (int32_t)rel)
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
	if (n != KH_JUMP_NPROBES || (size_t)(kh_jstub_end - kh_jstub) +
	    KINST_TRAMP_SIZE > KH_JCHUNK || (size_t)(kh_jstub_end -
	    kh_jstub) + (size_t)(kh_jcall_end - kh_jcall) > KH_JCHUNK)
		return;	/* every probe keeps its breakpoint */
	ready = calloc(n, 1);
	if (ready == NULL)
		return;
	for (p = 0; p < n; p++)
		ready[p] = (uint8_t)kh_jdetour(ki, p);
	kh_jready[ki - kh_insts] = ready;
}

uint32_t
kh_jump_place(struct kh_inst *ki, uint32_t probe, uintptr_t live)
{
	const uint8_t *ready;
	volatile uint8_t *b;
	uint32_t j, k;
	uint8_t rel[4];

	ready = kh_jready[ki - kh_insts];
	if (ready == NULL || !ready[probe] || live != ki->ki_addr[probe])
		return (0);
	k = kh_jump_n[probe];
	for (j = 0; j < k; j++)
		if (ki->ki_state[probe + j] != KH_S_READY)
			return (0);
	/* Ours before the jump can be taken. */
	for (j = 0; j < k; j++)
		__atomic_store_n(&ki->ki_state[probe + j], KH_S_PLACED,
		    __ATOMIC_RELEASE);
	kh_jput32(rel, (uint32_t)((uintptr_t)kh_jchunk(ki, probe) -
	    (live + KH_JMP_SIZE)));
	b = (volatile uint8_t *)live;
	for (j = 0; j < 4; j++)
		b[1 + j] = rel[j];
	b[0] = KH_JMP_OP;
	return (k);
}
