/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kk_target.c: the ring-0 guest's target module (`vm-test --guest linux`,
 * docs/vm-test.md).  Linux 6.1 is built with retpolines, so its compiler
 * emits no call through memory, and the kernel patches every
 * "call *pv_ops+N(%rip)" at boot: the two emulated call kinds "call-mem" and
 * "call-riprel" of kinst's amd64 record never run in its text.  This module
 * holds them, written in assembly so that the instruction forms are exactly
 * these, and runs them when /proc/kk_target is read (the guest's
 * workload does):
 *
 *	kk_target_call_mem:		call *8(%rbx); call *(%rbx,%rcx,8)
 *	kk_target_call_riprel:	call *kk_target_fp(%rip)
 *
 * The host plans their probes from this module's .ko (an ET_REL file, its
 * relocated fields masked in the table's digests).  The kinst module places
 * them by their offset from the start of the range this module exports,
 * kk_target_text, and reads or writes nothing outside it.  The range
 * starts with the anchor, "nopl KINST_TARGET_MARK(%rax)", which this module
 * runs when it loads: from its address the host's QEMU plugin, which is
 * told the same offsets, learns where the module landed.  KINST_TARGET_MARK
 * comes from the build (generator/run/ring0/oracle.py owns it).
 *
 * Its names start with kk_, not kinst_: kinst refuses every kinst_*
 * function as its own.
 *
 * The assembly has no site the module loader rewrites: no "call
 * __fentry__", no retpoline or return thunk (each indirect call and return
 * is marked retpoline-safe for objtool), no alternative.  The callees are
 * plain C.
 */

#include <linux/module.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/stringify.h>

#include <asm/nospec-branch.h>

#ifndef KINST_TARGET_MARK
#error "KINST_TARGET_MARK: the QEMU plugin's anchor, given by the build"
#endif

#define	KINST_TARGET_ROUNDS	1000

typedef unsigned long kk_target_fn(unsigned long);

void		kk_target_anchor(void);
unsigned long	kk_target_call_mem(kk_target_fn *const *, unsigned long);
unsigned long	kk_target_call_riprel(unsigned long);

static noinline unsigned long
kk_target_twice(unsigned long x)
{

	return (2 * x + 1);
}

static noinline unsigned long
kk_target_square(unsigned long x)
{

	return (x * x + 3);
}

/* What the calls through memory call: [0] by index, [1] by displacement. */
static kk_target_fn *const kk_target_ops[2] = {
	kk_target_twice,
	kk_target_square,
};

/* What the call through (%rip) calls. */
__used static kk_target_fn *kk_target_fp = kk_target_square;

/*
 * The probed code, between kk_target_text_start and _end, after the
 * anchor.  Each function keeps a frame, as compiled code does.
 */
asm(".pushsection .text, \"ax\", @progbits\n"
    ".balign 16\n"
    "kk_target_text_start:\n"
    ".globl kk_target_anchor\n"
    ".type kk_target_anchor, @function\n"
    "kk_target_anchor:\n"
    "	.byte	0x0f, 0x1f, 0x80\n"
    "	.long	" __stringify(KINST_TARGET_MARK) "\n"
    ANNOTATE_RETPOLINE_SAFE
    "	ret\n"
    "	int3\n"
    ".size kk_target_anchor, . - kk_target_anchor\n"
    /* ops[1](x), then ops[0] of that: base+disp, then base+index*8. */
    ".balign 16\n"
    ".globl kk_target_call_mem\n"
    ".type kk_target_call_mem, @function\n"
    "kk_target_call_mem:\n"
    "	pushq	%rbp\n"
    "	movq	%rsp, %rbp\n"
    "	pushq	%rbx\n"
    "	pushq	%rbx\n"		/* twice: %rsp 16-aligned at the calls */
    "	movq	%rdi, %rbx\n"
    "	movq	%rsi, %rdi\n"
    ANNOTATE_RETPOLINE_SAFE
    "	call	*8(%rbx)\n"
    "	movq	%rax, %rdi\n"
    "	xorl	%ecx, %ecx\n"
    ANNOTATE_RETPOLINE_SAFE
    "	call	*(%rbx,%rcx,8)\n"
    "	popq	%rbx\n"
    "	popq	%rbx\n"
    "	popq	%rbp\n"
    ANNOTATE_RETPOLINE_SAFE
    "	ret\n"
    "	int3\n"
    ".size kk_target_call_mem, . - kk_target_call_mem\n"
    /* kk_target_fp(x) + 1. */
    ".balign 16\n"
    ".globl kk_target_call_riprel\n"
    ".type kk_target_call_riprel, @function\n"
    "kk_target_call_riprel:\n"
    "	pushq	%rbp\n"
    "	movq	%rsp, %rbp\n"
    ANNOTATE_RETPOLINE_SAFE
    "	call	*kk_target_fp(%rip)\n"
    "	addq	$1, %rax\n"
    "	popq	%rbp\n"
    ANNOTATE_RETPOLINE_SAFE
    "	ret\n"
    "	int3\n"
    ".size kk_target_call_riprel, . - kk_target_call_riprel\n"
    "kk_target_text_end:\n"
    ".popsection\n");

extern const char kk_target_text_start[], kk_target_text_end[];

/* Where the probed code lies: the kinst module checks its table by it. */
const unsigned long kk_target_text[2] = {
	(unsigned long)kk_target_text_start,
	(unsigned long)kk_target_text_end,
};
EXPORT_SYMBOL_GPL(kk_target_text);

/* Reading /proc/kk_target runs both forms: sums of nothing else. */
static int
kk_target_show(struct seq_file *m, void *v)
{
	unsigned long i, mem, rip;

	mem = rip = 0;
	for (i = 0; i < KINST_TARGET_ROUNDS; i++) {
		mem += kk_target_call_mem(kk_target_ops, i);
		rip += kk_target_call_riprel(i);
	}
	seq_printf(m, "call-mem: %d rounds, sum %lu\n", KINST_TARGET_ROUNDS,
	    mem);
	seq_printf(m, "call-riprel: %d rounds, sum %lu\n", KINST_TARGET_ROUNDS,
	    rip);
	return (0);
}

static int __init
kk_target_init(void)
{

	kk_target_anchor();
	if (proc_create_single("kk_target", 0444, NULL,
	    kk_target_show) == NULL)
		return (-ENOMEM);
	return (0);
}

static void __exit
kk_target_exit(void)
{

	remove_proc_entry("kk_target", NULL);
}

module_init(kk_target_init);
module_exit(kk_target_exit);
MODULE_LICENSE("Dual BSD/GPL");
MODULE_DESCRIPTION("kinstkit's ring-0 target: calls through memory and "
    "(%rip)");
