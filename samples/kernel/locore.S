/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * Hand-written amd64 assembly for the sample kernel image: the btext entry
 * point, two functions that break the usual frame-pointer prologue, and a
 * "zoo" of functions that each hold instruction classes a kinst analysis
 * must recognise (loops, traps, far transfers, indirect calls and jumps,
 * RIP-relative operands, ...).
 *
 * The image is only analysed, never run, but it is kept sane anyway: every
 * instruction that would fault, trap or leave the kernel (int3, int $0x80,
 * int1, ud0/1/2, iretq, far call/jump, swapgs, xbegin, the absolute
 * indirect calls) sits on a path that is jumped over.
 *
 * Every zoo function starts with "push %rbp; mov %rsp,%rbp" and leaves
 * through "pop %rbp; ret" (zoo_jumps also has a tail jump).
 */

#define	ENTRY(name)			\
	.text;				\
	.p2align 4,0x90;		\
	.globl	name;			\
	.type	name,@function;		\
name:

#define	END(name)			\
	.size	name, . - name

	.data
	.p2align 3
	.globl	zoo_counter, zoo_flag, zoo_lock, zoo_fnptr, zoo_table
zoo_counter:	.long	0
zoo_lock:	.long	0
zoo_flag:	.byte	0
	.p2align 3
zoo_fnptr:	.quad	zoo_leaf
zoo_table:	.quad	zoo_leaf, zoo_leaf, zoo_leaf, zoo_leaf

/*
 * Kernel entry: the ELF entry point of the image.
 */
ENTRY(btext)
	pushq	%rbp
	movq	%rsp,%rbp
	call	mi_startup
1:	hlt
	jmp	1b
END(btext)

/*
 * bcopy(src, dst, len) without any frame: there is no push %rbp anywhere,
 * so the frame-pointer rule refuses the whole function.
 */
ENTRY(bcopy_nofp)
	xchgq	%rsi,%rdi
	movq	%rdx,%rcx
	rep movsb
	ret
END(bcopy_nofp)

/*
 * The first instruction is not push %rbp; the frame is set up one
 * instruction later.
 */
ENTRY(late_frame)
	movq	%rdi,%rax
	pushq	%rbp
	movq	%rsp,%rbp
	addq	%rsi,%rax
	popq	%rbp
	ret
END(late_frame)

/*
 * A tiny leaf reached through the pointers in zoo_fnptr and zoo_table.
 */
ENTRY(zoo_leaf)
	pushq	%rbp
	movq	%rsp,%rbp
	xorl	%eax,%eax
	popq	%rbp
	ret
END(zoo_leaf)

/*
 * loop, loope, loopne and jrcxz: rel8 branches that depend on %rcx.
 */
ENTRY(zoo_loops)
	pushq	%rbp
	movq	%rsp,%rbp
	xorl	%eax,%eax
	movq	%rdi,%rcx
	jrcxz	3f
1:	incq	%rax
	loop	1b
	movq	%rdi,%rcx
2:	cmpq	$7,%rax
	loope	2b
	movq	%rdi,%rcx
4:	decq	%rax
	testq	%rax,%rax
	loopne	4b
3:	popq	%rbp
	ret
END(zoo_loops)

/*
 * Traps and undefined opcodes, all jumped over.  The assemblers do not all
 * know int1 and ud0, so they are written as bytes.
 */
ENTRY(zoo_traps)
	pushq	%rbp
	movq	%rsp,%rbp
	jmp	9f
	int3
	int	$0x80
	.byte	0xf1			/* int1 (icebp) */
	ud2
	.byte	0x0f,0xb9,0xc0		/* ud1 %eax,%eax */
	.byte	0x0f,0xff,0xc0		/* ud0 %eax,%eax */
9:	popq	%rbp
	ret
END(zoo_traps)

/*
 * Far control transfers and iretq, all jumped over.
 */
ENTRY(zoo_far)
	pushq	%rbp
	movq	%rsp,%rbp
	jmp	9f
	lcall	*(%rax)
	ljmp	*(%rax)
	iretq
9:	popq	%rbp
	ret
END(zoo_far)

/*
 * Indirect calls in every addressing form.  The two forms whose table
 * address is an absolute constant (disp32 with no base, and a table on the
 * stack) sit on a path that is jumped over.
 */
ENTRY(zoo_calls)
	pushq	%rbp
	movq	%rsp,%rbp
	pushq	%rbx
	subq	$24,%rsp
	movq	%rdi,%rbx
	leaq	zoo_leaf(%rip),%rax
	movq	%rax,8(%rsp)
	call	*8(%rsp)		/* SIB, no index */
	leaq	zoo_leaf(%rip),%rax
	call	*%rax			/* register */
	leaq	zoo_leaf(%rip),%r11
	call	*%r11			/* REX.B register */
	leaq	zoo_fnptr(%rip),%rax
	call	*(%rax)			/* memory, base register */
	call	*zoo_fnptr(%rip)	/* memory, RIP-relative */
	andq	$3,%rbx
	call	*zoo_table(,%rbx,8)	/* memory, absolute table + index */
	jmp	9f
	movq	%rbx,%rcx
	call	*0x10(,%rcx,8)		/* SIB base=101, mod=00: disp32 */
	call	*0x8(%rbp,%rcx,8)	/* SIB base %rbp + index */
9:	movq	%rbx,%rax
	addq	$24,%rsp
	popq	%rbx
	popq	%rbp
	ret
END(zoo_calls)

/*
 * Direct and indirect jumps: short and near forms of jmp and jcc, a jump
 * through a register, through an absolute table, and a RIP-relative tail
 * jump through a pointer.
 */
ENTRY(zoo_jumps)
	pushq	%rbp
	movq	%rsp,%rbp
	xorl	%eax,%eax
	testl	%edi,%edi
	je	1f			/* short je (74) */
	cmpl	$1,%edi
	{disp32} jne	2f		/* near jne (0f 85) */
	leaq	3f(%rip),%rax
	jmp	*%rax			/* register, to a label in here */
1:	movl	$1,%eax
	jmp	4f			/* short jmp (eb) */
2:	cmpl	$2,%edi
	{disp32} jmp	5f		/* near jmp (e9) */
	movslq	%edi,%rax
	jmp	*0x20(,%rax,8)		/* absolute table; never reached */
3:	movl	$3,%eax
4:	popq	%rbp
	ret
5:	popq	%rbp
	jmp	*zoo_fnptr(%rip)	/* RIP-relative tail jump */
END(zoo_jumps)

/*
 * RIP-relative operands: lea, a store with an immediate after the
 * displacement (the displacement is not the last field), and a compare.
 */
ENTRY(zoo_riprel)
	pushq	%rbp
	movq	%rsp,%rbp
	leaq	zoo_counter(%rip),%rax
	movl	$5,zoo_counter(%rip)
	cmpb	$1,zoo_flag(%rip)
	jne	1f
	incl	(%rax)
1:	movl	zoo_counter(%rip),%eax
	popq	%rbp
	ret
END(zoo_riprel)

/*
 * zoo_misc(dst, src, len): rep movsb, lock cmpxchg, popfq and sti on the
 * live path; swapgs and an xbegin region jumped over.
 */
ENTRY(zoo_misc)
	pushq	%rbp
	movq	%rsp,%rbp
	movq	%rdx,%rcx
	rep movsb
	xorl	%eax,%eax
	movl	$1,%edx
	lock cmpxchgl %edx,zoo_lock(%rip)
	pushfq
	cli
	movl	$0,zoo_lock(%rip)
	popfq
	sti
	jmp	9f
	swapgs
	xbegin	8f
	incl	zoo_counter(%rip)
	xend
8:	swapgs
9:	popq	%rbp
	ret
END(zoo_misc)

	.section .note.GNU-stack,"",@progbits
