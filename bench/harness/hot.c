/*
 * hot.c: the harness side of the benchmark, a shared library with two tiny
 * frame-pointer functions whose every instruction is a probe:
 *
 * hot_lea(x) = 3x + 1: push, mov, lea, pop, ret: five trampoline hits;
 * hot_call(x) = hot_leaf(x): push, mov, call rel32 (emulated), pop, ret:
 *   four trampoline hits and one call emulation (hot_leaf is not probed).
 * hot_jump(x) = 3x + 1 as hot_lea, then a nop after the ret, inside the
 *   function, so that under harness --jump both five-byte windows fit:
 *   push, mov, lea in one detour, pop, ret (and the nop, never run) in the
 *   other; five hits, all of them jump hits (or all breakpoints without
 *   --jump).
 */

long	hot_lea(long);
long	hot_call(long);
long	hot_jump(long);

__asm__(
"	.text\n"
"	.type	hot_leaf, @function\n"
"hot_leaf:\n"
"	leaq	1(%rdi,%rdi,2), %rax\n"
"	ret\n"
"	.size	hot_leaf, .-hot_leaf\n"
"	.globl	hot_lea\n"
"	.type	hot_lea, @function\n"
"hot_lea:\n"
"	pushq	%rbp\n"
"	movq	%rsp, %rbp\n"
"	leaq	1(%rdi,%rdi,2), %rax\n"
"	popq	%rbp\n"
"	ret\n"
"	.size	hot_lea, .-hot_lea\n"
"	.globl	hot_call\n"
"	.type	hot_call, @function\n"
"hot_call:\n"
"	pushq	%rbp\n"
"	movq	%rsp, %rbp\n"
"	call	hot_leaf\n"
"	popq	%rbp\n"
"	ret\n"
"	.size	hot_call, .-hot_call\n"
"	.globl	hot_jump\n"
"	.type	hot_jump, @function\n"
"hot_jump:\n"
"	pushq	%rbp\n"
"	movq	%rsp, %rbp\n"
"	leaq	1(%rdi,%rdi,2), %rax\n"
"	popq	%rbp\n"
"	ret\n"
"	nopl	0(%rax)\n"
"	.size	hot_jump, .-hot_jump\n");
