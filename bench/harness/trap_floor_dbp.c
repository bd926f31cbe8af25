/*
 * trap_floor_dbp.c: the floor for the harness benchmark on arm64 and
 * riscv64, run under qemu-user: bare breakpoint round trips and nothing
 * else, in the two shapes a kinstkit probe hit takes there.
 *
 * floor_target(x) = 3(x + 1) starts with an add of 1.
 * "single": its first instruction is overwritten with a breakpoint whose
 * handler checks the pc, counts and runs the instruction itself (an
 * emulated probe: one trap).  "double": the handler sends the thread to a
 * trampoline [instruction][breakpoint], and the trampoline's breakpoint
 * back to the next instruction (a trampolined probe: two traps).  The
 * program times N calls unpatched and N calls patched, and prints the cost
 * per hit.
 *
 * usage: trap_floor_dbp single|double [N]   (default 200000)
 */

#define	_GNU_SOURCE
#include <sys/mman.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

long	floor_target(long);

#if defined(__aarch64__)
__asm__(
"	.text\n"
"	.p2align 12\n"
"	.globl	floor_target\n"
"	.type	floor_target, %function\n"
"floor_target:\n"
"	add	x0, x0, #1\n"
"	add	x0, x0, x0, lsl #1\n"
"	ret\n"
"	.size	floor_target, .-floor_target\n");
#define	BREAKPOINT	0xd42081a0U	/* brk #0x40d */
#define	PC(uc)		((uc)->uc_mcontext.pc)
#define	X0(uc)		((uc)->uc_mcontext.regs[0])
#elif defined(__riscv)
__asm__(
"	.text\n"
"	.p2align 12\n"
"	.globl	floor_target\n"
"	.type	floor_target, @function\n"
"	.option	push\n"
"	.option	norvc\n"
"floor_target:\n"
"	addi	a0, a0, 1\n"
"	slli	t0, a0, 1\n"
"	add	a0, a0, t0\n"
"	ret\n"
"	.option	pop\n"
"	.size	floor_target, .-floor_target\n");
#define	BREAKPOINT	0x00100073U	/* ebreak */
#define	PC(uc)		((uc)->uc_mcontext.__gregs[REG_PC])
#define	X0(uc)		((uc)->uc_mcontext.__gregs[REG_A0])
#else
#error "trap_floor_dbp is for arm64 and riscv64"
#endif

static uint32_t *tramp;
static uint32_t saved;
static int twice;
static volatile unsigned long hits;

static void
on_trap(int sig, siginfo_t *si, void *arg)
{
	ucontext_t *uc;
	uintptr_t pc;

	(void)si;
	uc = arg;
	pc = (uintptr_t)PC(uc);
	if (twice && pc == (uintptr_t)(tramp + 1)) {
		PC(uc) = (uintptr_t)floor_target + 4;
		return;
	}
	if (pc != (uintptr_t)floor_target) {
		signal(sig, SIG_DFL);
		return;
	}
	hits++;
	if (twice) {
		PC(uc) = (uintptr_t)tramp;
		return;
	}
	X0(uc) = X0(uc) + 1;	/* what the first instruction does */
	PC(uc) = pc + 4;
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (ts.tv_sec * 1e9 + ts.tv_nsec);
}

static double
timed(long (*volatile f)(long), long n, long *sum)
{
	double t0;
	long i, s;

	s = 0;
	t0 = now();
	for (i = 0; i < n; i++)
		s += f(i);
	*sum = s;
	return (now() - t0);
}

int
main(int argc, char **argv)
{
	struct sigaction sa;
	uint8_t *page;
	long n, s1, s2;
	double plain, probed;
	size_t pg;

	if (argc < 2)
		return (2);
	twice = strcmp(argv[1], "double") == 0;
	n = argc > 2 ? atol(argv[2]) : 200000;
	pg = (size_t)sysconf(_SC_PAGESIZE);
	page = (uint8_t *)((uintptr_t)floor_target & ~(pg - 1));
	tramp = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE |
	    MAP_ANONYMOUS, -1, 0);
	if (tramp == MAP_FAILED)
		return (1);
	memcpy(&saved, (void *)floor_target, 4);
	tramp[0] = saved;
	tramp[1] = BREAKPOINT;
	__builtin___clear_cache((char *)tramp, (char *)(tramp + 2));
	if (mprotect(tramp, pg, PROT_READ | PROT_EXEC) != 0)
		return (1);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigfillset(&sa.sa_mask);
	sigaction(SIGTRAP, &sa, NULL);

	plain = timed(floor_target, n, &s1);
	if (mprotect(page, pg, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
		return (1);
	*(volatile uint32_t *)(uintptr_t)floor_target = BREAKPOINT;
	__builtin___clear_cache((char *)page, (char *)page + 8);
	mprotect(page, pg, PROT_READ | PROT_EXEC);
	probed = timed(floor_target, n, &s2);
	if (s1 != s2 || hits != (unsigned long)n) {
		fprintf(stderr, "trap_floor_dbp: wrong result (sums %ld %ld, hits %lu)\n",
		    s1, s2, hits);
		return (1);
	}
	printf("calls=%ld hits=%lu ns_plain=%.2f ns_probed=%.1f ns_per_hit=%.1f\n",
	    n, hits, plain / n, probed / n, (probed - plain) / (double)hits);
	return (0);
}
