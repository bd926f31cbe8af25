/*
 * trap_floor.c: the floor for the harness benchmark: a bare SIGTRAP and
 * trampoline round trip, and nothing else.
 *
 * floor_target(x) = 3x + 1 starts with "lea (%rdi,%rdi,2),%rax" (48 8d 04
 * 7f: 4 bytes, not RIP-relative), as in the measurement this project's
 * environment notes quote (about 2.5 us per hit here).  Its first byte is overwritten with int3; a trampoline
 * holds the original instruction, then "jmp *0(%rip)" and the address of the
 * next instruction.  The SA_SIGINFO handler checks that %rip - 1 is the
 * target, counts the hit and sets %rip to the trampoline.  The program
 * times N calls unpatched and N calls patched, and prints the cost per hit.
 *
 * usage: trap_floor [N]   (default 200000)
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

__asm__(
"	.text\n"
"	.p2align 12\n"
"	.globl	floor_target\n"
"	.type	floor_target, @function\n"
"floor_target:\n"
"	leaq	(%rdi,%rdi,2), %rax\n"
"	incq	%rax\n"
"	ret\n"
"	.size	floor_target, .-floor_target\n");

static uint8_t *tramp;
static volatile unsigned long hits;

static void
on_trap(int sig, siginfo_t *si, void *arg)
{
	ucontext_t *uc;

	(void)si;
	uc = arg;
	if ((uintptr_t)uc->uc_mcontext.gregs[REG_RIP] - 1 !=
	    (uintptr_t)floor_target) {
		signal(sig, SIG_DFL);
		return;
	}
	hits++;
	uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)tramp;
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
	uint64_t resume;
	uint8_t *page;
	long n, s1, s2;
	double plain, probed;
	size_t pg;

	n = argc > 1 ? atol(argv[1]) : 200000;
	pg = (size_t)sysconf(_SC_PAGESIZE);
	page = (uint8_t *)((uintptr_t)floor_target & ~(pg - 1));
	tramp = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE |
	    MAP_ANONYMOUS, -1, 0);
	if (tramp == MAP_FAILED)
		return (1);
	memcpy(tramp, (void *)floor_target, 4);
	tramp[4] = 0xff;
	tramp[5] = 0x25;
	memset(tramp + 6, 0, 4);
	resume = (uint64_t)(uintptr_t)floor_target + 4;
	memcpy(tramp + 10, &resume, 8);
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
	*(volatile uint8_t *)(uintptr_t)floor_target = 0xcc;
	mprotect(page, pg, PROT_READ | PROT_EXEC);
	probed = timed(floor_target, n, &s2);
	if (s1 != s2 || hits != (unsigned long)n) {
		fprintf(stderr, "trap_floor: wrong result (sums %ld %ld, hits %lu)\n",
		    s1, s2, hits);
		return (1);
	}
	printf("calls=%ld hits=%lu ns_plain=%.2f ns_probed=%.1f ns_per_hit=%.1f\n",
	    n, hits, plain / n, probed / n, (probed - plain) / (double)hits);
	return (0);
}
