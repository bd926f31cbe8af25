/*
 * hot_dbp.c: the harness side of the benchmark on arm64 and riscv64, a
 * shared library with the two functions hot_main.c calls, every
 * instruction a probe:
 *
 * hot_lea(x) = 3x + 1: frame set-up, two arithmetic instructions, frame
 *   tear-down (all trampolined: two traps a hit), and ret (emulated);
 * hot_call(x) = hot_leaf(x): the same around a bl/jal (emulated).
 */

long	hot_lea(long);
long	hot_call(long);

#if defined(__aarch64__)
__asm__(
"	.text\n"
"	.type	hot_leaf, %function\n"
"hot_leaf:\n"
"	add	x0, x0, x0, lsl #1\n"
"	add	x0, x0, #1\n"
"	ret\n"
"	.size	hot_leaf, .-hot_leaf\n"
"	.globl	hot_lea\n"
"	.type	hot_lea, %function\n"
"hot_lea:\n"
"	stp	x29, x30, [sp, #-16]!\n"
"	mov	x29, sp\n"
"	add	x0, x0, x0, lsl #1\n"
"	add	x0, x0, #1\n"
"	ldp	x29, x30, [sp], #16\n"
"	ret\n"
"	.size	hot_lea, .-hot_lea\n"
"	.globl	hot_call\n"
"	.type	hot_call, %function\n"
"hot_call:\n"
"	stp	x29, x30, [sp, #-16]!\n"
"	mov	x29, sp\n"
"	bl	hot_leaf\n"
"	ldp	x29, x30, [sp], #16\n"
"	ret\n"
"	.size	hot_call, .-hot_call\n");
#elif defined(__riscv)
__asm__(
"	.text\n"
"	.type	hot_leaf, @function\n"
"hot_leaf:\n"
"	slli	a1, a0, 1\n"
"	add	a0, a0, a1\n"
"	addi	a0, a0, 1\n"
"	ret\n"
"	.size	hot_leaf, .-hot_leaf\n"
"	.globl	hot_lea\n"
"	.type	hot_lea, @function\n"
"hot_lea:\n"
"	addi	sp, sp, -16\n"
"	sd	ra, 8(sp)\n"
"	slli	a1, a0, 1\n"
"	add	a0, a0, a1\n"
"	addi	a0, a0, 1\n"
"	ld	ra, 8(sp)\n"
"	addi	sp, sp, 16\n"
"	ret\n"
"	.size	hot_lea, .-hot_lea\n"
"	.globl	hot_call\n"
"	.type	hot_call, @function\n"
"hot_call:\n"
"	addi	sp, sp, -16\n"
"	sd	ra, 8(sp)\n"
"	jal	hot_leaf\n"
"	ld	ra, 8(sp)\n"
"	addi	sp, sp, 16\n"
"	ret\n"
"	.size	hot_call, .-hot_call\n");
#else
#error "hot_dbp is for arm64 and riscv64"
#endif
