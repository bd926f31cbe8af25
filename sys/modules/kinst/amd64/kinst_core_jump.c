/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core_jump.c: the detour of a jump probe and the steps that place
 * and remove its jump, amd64; see kinst_core_jump.h.  The one owner of the
 * detour's layout: every glue fills its chunks here.
 */

#include "kinst_core_jump.h"

/*
 * The stub, as machine code in pieces, so that the KINST_JUMP_FPU and the
 * plain stub are one template.  Assembled from:
 *
 *   save:  leaq -128(%rsp),%rsp; pushfq; pushq %rax, %rcx, %rdx, %rbx,
 *          %rbp, %rsi, %rdi, %r8 .. %r15; cld; movq %rsp,%rdi;
 *          movq %rsp,%rbx; andq $-16,%rsp
 *   fpu:   subq $512,%rsp; fxsave64 (%rsp); movq %rsp,%rdx
 *   nofpu: xorl %edx,%edx
 *   call:  movabsq $arg,%rsi; movabsq $handler,%rax; callq *%rax
 *   fpur:  fxrstor64 (%rsp)
 *   rest:  movq %rbx,%rsp; popq %r15 .. %r8, %rdi, %rsi, %rbp, %rbx,
 *          %rdx, %rcx, %rax; popfq; leaq 128(%rsp),%rsp
 *
 * %rbx is callee-saved, so it keeps the frame's address across the call.
 */
static const kc_uint8_t kinst_js_save[] = {
	0x48, 0x8d, 0x64, 0x24, 0x80, 0x9c, 0x50, 0x51, 0x52, 0x53, 0x55,
	0x56, 0x57, 0x41, 0x50, 0x41, 0x51, 0x41, 0x52, 0x41, 0x53, 0x41,
	0x54, 0x41, 0x55, 0x41, 0x56, 0x41, 0x57, 0xfc, 0x48, 0x89, 0xe7,
	0x48, 0x89, 0xe3, 0x48, 0x83, 0xe4, 0xf0,
};
static const kc_uint8_t kinst_js_fpu[] = {
	0x48, 0x81, 0xec, 0x00, 0x02, 0x00, 0x00, 0x48, 0x0f, 0xae, 0x04,
	0x24, 0x48, 0x89, 0xe2,
};
static const kc_uint8_t kinst_js_nofpu[] = { 0x31, 0xd2 };
static const kc_uint8_t kinst_js_call[] = {
	0x48, 0xbe, 0, 0, 0, 0, 0, 0, 0, 0,	/* movabsq $arg, %rsi */
	0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,	/* movabsq $handler, %rax */
	0xff, 0xd0,
};
#define	KINST_JS_ARG	2	/* the immediates in kinst_js_call */
#define	KINST_JS_FN	12
static const kc_uint8_t kinst_js_fpur[] = { 0x48, 0x0f, 0xae, 0x0c, 0x24 };
static const kc_uint8_t kinst_js_rest[] = {
	0x48, 0x89, 0xdc, 0x41, 0x5f, 0x41, 0x5e, 0x41, 0x5d, 0x41, 0x5c,
	0x41, 0x5b, 0x41, 0x5a, 0x41, 0x59, 0x41, 0x58, 0x5f, 0x5e, 0x5d,
	0x5b, 0x5a, 0x59, 0x58, 0x9d, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00,
	0x00, 0x00,
};

/*
 * A last displaced direct call: leaq -8(%rsp),%rsp; movl $lo,(%rsp);
 * movl $hi,4(%rsp); jmp *0(%rip); .quad target.  leaq and movl leave the
 * flags as the call would.
 */
static const kc_uint8_t kinst_js_jcall[] = {
	0x48, 0x8d, 0x64, 0x24, 0xf8,
	0xc7, 0x04, 0x24, 0, 0, 0, 0,
	0xc7, 0x44, 0x24, 0x04, 0, 0, 0, 0,
	0xff, 0x25, 0x00, 0x00, 0x00, 0x00,
	0, 0, 0, 0, 0, 0, 0, 0,
};
#define	KINST_JC_LO	8	/* the immediates in kinst_js_jcall */
#define	KINST_JC_HI	16
#define	KINST_JC_TARGET	26

#define	KINST_JS_LEN(a)	(sizeof(a) / sizeof((a)[0]))

const struct kinst_jstep kinst_jump_place[] = {
	/* A breakpoint hit from now on resumes in the detour. */
	{ KINST_JS_VIA, 0, 0, KINST_JV_DETOUR },
	/*
	 * Every CPU sees the int3 at byte 0 and has left any breakpoint
	 * handler that chose the trampoline: none enters the tail now.
	 */
	{ KINST_JS_SYNC, 0, 0, 0 },
	/* None is stopped inside the tail or on its way there. */
	{ KINST_JS_QUIET, 0, 0, 0 },
	{ KINST_JS_WRITE, 1, KINST_JUMP_SIZE - 1, KINST_JB_JUMP },
	{ KINST_JS_SYNC, 0, 0, 0 },
	{ KINST_JS_WRITE, 0, 1, KINST_JB_JUMP },
	{ KINST_JS_SYNC, 0, 0, 0 },
	{ KINST_JS_END, 0, 0, 0 },
};

const struct kinst_jstep kinst_jump_remove[] = {
	{ KINST_JS_WRITE, 0, 1, KINST_JB_TRAP },
	{ KINST_JS_SYNC, 0, 0, 0 },
	{ KINST_JS_WRITE, 1, KINST_JUMP_SIZE - 1, KINST_JB_ORIG },
	{ KINST_JS_SYNC, 0, 0, 0 },
	{ KINST_JS_VIA, 0, 0, KINST_JV_TRAMP },
	{ KINST_JS_END, 0, 0, 0 },
};

static void
kinst_jput(volatile kc_uint8_t *p, kc_uint64_t v, int n)
{
	int i;

	for (i = 0; i < n; i++)
		p[i] = (kc_uint8_t)(v >> (8 * i));
}

static kc_uint32_t
kinst_jcopy(volatile kc_uint8_t *buf, kc_uint32_t at, const kc_uint8_t *src,
    kc_uint32_t len)
{
	kc_uint32_t i;

	for (i = 0; i < len; i++)
		buf[at + i] = src[i];
	return (at + len);
}

/*
 * Whether 'k' displaced instructions of lengths 'lens', one after another
 * from the head, are what a jump displaces: 0 if they cover
 * KINST_JUMP_SIZE bytes and the last starts inside them, else
 * KINST_E_TABLE.
 */
int
kinst_core_jump_window(const kc_uint8_t *lens, kc_uint32_t k)
{
	kc_uint32_t end, j;

	if (k == 0)
		return (KINST_E_TABLE);
	end = 0;
	for (j = 0; j < k; j++) {
		if (end >= KINST_JUMP_SIZE || lens[j] == 0)
			return (KINST_E_TABLE);
		end += lens[j];
	}
	return (end >= KINST_JUMP_SIZE ? 0 : KINST_E_TABLE);
}

/*
 * Fill one chunk of a detour: the stub calling 'handler' with 'arg', then
 * the instruction 'md' at 'pc', run at 'chunk' and written at 'buf'
 * (KINST_JUMP_CHUNK bytes, the rest int3), resuming at 'resume' (the next
 * chunk, or for the 'last' displaced instruction pc plus its length).  0;
 * KINST_E_KIND for a call that is not the last or not direct (its target
 * is not fixed), KINST_E_RANGE when the relocated instruction cannot reach
 * its target from the chunk, KINST_E_TABLE when it does not fit.
 */
int
kinst_core_jump_fill(const struct kinst_md *md, kc_uintptr_t pc,
    kc_uintptr_t chunk, volatile kc_uint8_t *buf, kc_uint64_t resume,
    int last, kc_uint64_t handler, kc_uint64_t arg, unsigned flags)
{
	struct kinst_regs kr;
	kc_uint64_t target, retaddr;
	kc_uint32_t at, i, room;
	int fpu;

	fpu = (flags & KINST_JUMP_FPU) != 0;
	at = (kc_uint32_t)(KINST_JS_LEN(kinst_js_save) +
	    (fpu ? KINST_JS_LEN(kinst_js_fpu) + KINST_JS_LEN(kinst_js_fpur) :
	    KINST_JS_LEN(kinst_js_nofpu)) + KINST_JS_LEN(kinst_js_call) +
	    KINST_JS_LEN(kinst_js_rest));
	room = kinst_core_is_call(md) ? (kc_uint32_t)KINST_JS_LEN(
	    kinst_js_jcall) : KINST_TRAMP_SIZE;
	if (at + room > KINST_JUMP_CHUNK)
		return (KINST_E_TABLE);
	for (i = 0; i < KINST_JUMP_CHUNK; i++)
		buf[i] = KINST_PATCHVAL;
	at = kinst_jcopy(buf, 0, kinst_js_save, KINST_JS_LEN(kinst_js_save));
	if (fpu)
		at = kinst_jcopy(buf, at, kinst_js_fpu,
		    KINST_JS_LEN(kinst_js_fpu));
	else
		at = kinst_jcopy(buf, at, kinst_js_nofpu,
		    KINST_JS_LEN(kinst_js_nofpu));
	kinst_jcopy(buf, at, kinst_js_call, KINST_JS_LEN(kinst_js_call));
	kinst_jput(buf + at + KINST_JS_ARG, arg, 8);
	kinst_jput(buf + at + KINST_JS_FN, handler, 8);
	at += (kc_uint32_t)KINST_JS_LEN(kinst_js_call);
	if (fpu)
		at = kinst_jcopy(buf, at, kinst_js_fpur,
		    KINST_JS_LEN(kinst_js_fpur));
	at = kinst_jcopy(buf, at, kinst_js_rest, KINST_JS_LEN(kinst_js_rest));
	if (!kinst_core_is_call(md))
		return (kinst_core_tramp_fill_to(md, pc, chunk + at, buf + at,
		    resume));
	if (!last || md->km_kind != KINST_K_CALL_DIRECT)
		return (KINST_E_KIND);
	for (i = 0; i < 16; i++)
		kr.kr_gpr[i] = 0;
	kr.kr_rip = pc;
	kr.kr_rflags = 0;
	if (kinst_core_call(md, pc, &kr, &target, &retaddr) != 0)
		return (KINST_E_KIND);
	kinst_jcopy(buf, at, kinst_js_jcall, KINST_JS_LEN(kinst_js_jcall));
	kinst_jput(buf + at + KINST_JC_LO, retaddr, 4);
	kinst_jput(buf + at + KINST_JC_HI, retaddr >> 32, 4);
	kinst_jput(buf + at + KINST_JC_TARGET, target, 8);
	return (0);
}

/*
 * The five bytes of the jump at 'pc' to the detour at 'detour' into 'out':
 * 0, or KINST_E_RANGE beyond a rel32's reach.
 */
int
kinst_core_jump_bytes(kc_uintptr_t pc, kc_uintptr_t detour,
    kc_uint8_t out[KINST_JUMP_SIZE])
{
	kc_int64_t rel;

	rel = (kc_int64_t)(detour - (pc + KINST_JUMP_SIZE));
	if (rel < -(kc_int64_t)0x80000000 || rel > (kc_int64_t)0x7fffffff)
		return (KINST_E_RANGE);
	out[0] = KINST_JUMP_OP;
	kinst_jput(out + 1, (kc_uint64_t)rel, 4);
	return (0);
}

/*
 * The quiescence rule: 1 when none of the 'n' saved PCs lies inside the
 * bytes the jump's rel32 overwrites, (pc, pc + KINST_JUMP_SIZE), or inside
 * the head's trampoline, [tramp, tramp + tlen) (it resumes after the
 * head, inside the window, unless the head is 5 bytes or more); 0 when
 * one does: the thread would resume in the middle of the jump, and the
 * site stays a breakpoint.  The first byte is not inside: a thread stopped
 * there runs the jump when it resumes.  'saved' may hold more than PCs
 * (every word of a stack, say): a false match only keeps the breakpoint.
 */
int
kinst_core_jump_quiet(kc_uintptr_t pc, kc_uintptr_t tramp, kc_uint32_t tlen,
    const kc_uint64_t *saved, kc_uint32_t n)
{
	kc_uint32_t i;

	for (i = 0; i < n; i++) {
		if (saved[i] > pc && saved[i] < pc + KINST_JUMP_SIZE)
			return (0);
		if (saved[i] >= tramp && saved[i] - tramp < tlen)
			return (0);
	}
	return (1);
}

/*
 * The protocol's one walker: run 'steps' (kinst_jump_place[] or
 * kinst_jump_remove[]) over one site whose jump is 'jump' and whose
 * original bytes are 'orig', from step '*at' up to the next SYNC or the
 * end, each WRITE, QUIET and VIA through the glue's 'ops'.  A SYNC is not
 * run here: it returns with '*at' past it, and the glue makes every CPU
 * serialize, then calls again (KINST_JUMP_SYNC) or not, the SYNC being
 * the protocol's last step (KINST_JUMP_SYNC_END); so one glue syncs per
 * site (kinst_core_jump_run()) and another advances every site to its
 * next SYNC and syncs once for all of them.  0 at the end; KINST_E_BUSY
 * when the quiescence check failed, with the steps before it done (the
 * breakpoint stays).  '*at' is then at the end: the walk is over.
 */
int
kinst_core_jump_next(const struct kinst_jstep *steps, kc_uint32_t *at,
    const kc_uint8_t jump[KINST_JUMP_SIZE],
    const kc_uint8_t orig[KINST_JUMP_SIZE], const struct kinst_jops *ops,
    void *ctx)
{
	static const kc_uint8_t trap = KINST_PATCHVAL;
	const struct kinst_jstep *s;
	const kc_uint8_t *src;

	for (s = &steps[*at]; s->js_op != KINST_JS_END; s++) {
		switch (s->js_op) {
		case KINST_JS_WRITE:
			src = s->js_src == KINST_JB_TRAP ? &trap :
			    (s->js_src == KINST_JB_JUMP ? jump : orig) +
			    s->js_off;
			ops->jo_write(ctx, s->js_off, src, s->js_len);
			break;
		case KINST_JS_SYNC:
			*at = (kc_uint32_t)(s + 1 - steps);
			return (s[1].js_op == KINST_JS_END ?
			    KINST_JUMP_SYNC_END : KINST_JUMP_SYNC);
		case KINST_JS_QUIET:
			if (ops->jo_quiet(ctx))
				break;
			while (s->js_op != KINST_JS_END)
				s++;
			*at = (kc_uint32_t)(s - steps);
			return (KINST_E_BUSY);
		case KINST_JS_VIA:
			ops->jo_via(ctx, s->js_src);
			break;
		}
	}
	*at = (kc_uint32_t)(s - steps);
	return (0);
}

/*
 * Run a protocol over one site to its end, each SYNC through the glue's
 * jo_sync: kinst_core_jump_next() site by site.  0 when every step ran;
 * KINST_E_BUSY as there.
 */
int
kinst_core_jump_run(const struct kinst_jstep *steps,
    const kc_uint8_t jump[KINST_JUMP_SIZE],
    const kc_uint8_t orig[KINST_JUMP_SIZE], const struct kinst_jops *ops,
    void *ctx)
{
	kc_uint32_t at;
	int rv;

	at = 0;
	do {
		rv = kinst_core_jump_next(steps, &at, jump, orig, ops, ctx);
		if (rv == KINST_JUMP_SYNC || rv == KINST_JUMP_SYNC_END)
			ops->jo_sync(ctx);
	} while (rv == KINST_JUMP_SYNC);
	return (rv == KINST_JUMP_SYNC_END ? 0 : rv);
}

/* The %rsp the probed code had when it entered the detour. */
kc_uint64_t
kinst_core_jump_sp(const struct kinst_jframe *f)
{

	return ((kc_uint64_t)(kc_uintptr_t)(f + 1) + KINST_JUMP_REDZONE);
}
