/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_vars.c: the harness's evaluator of variable readings, an optional part
 * of the library that generator/run/harness.py compiles in when a build
 * carries readings (generator/run/varsprobe.py renders them into
 * kinst_harness_vars.h: the values `probes --vars` and `dscript kinst-line
 * --print` promise, each as a program printed from the same location record
 * as the D expression).  It defines kh_hit() (kh_isa.h): at each hit of a
 * site the header lists, it runs every reading's program against the trap's
 * registers and memory and records the 64-bit results of the site's first
 * KH_VARS_NHITS hits, so that the tests can hold them to gdb's `print` at
 * the same hits.
 *
 * Probe context: no libc.  Memory is read with pread(2) on /proc/self/mem,
 * opened by the constructor, so that a bad address is an error to record and
 * not a fault in the handler.  The results live in a shared file mapping,
 * "$KINST_HARNESS_OUT.<pid>.vars": a header of four little-endian u64
 * (magic, sites, readings, hits per site), then per site its hit count, then
 * per site, hit and reading a u64 value and a u64 status (KH_VAR_*).
 */

#define	_GNU_SOURCE		/* REG_* of <sys/ucontext.h> */

#include <sys/types.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "kinst_core.h"
#include "kh_isa.h"
#include "kinst_harness_vars.h"

#define	KH_VAR_NONE	0	/* not recorded (fewer hits) */
#define	KH_VAR_OK	1
#define	KH_VAR_MEMORY	2	/* a load from an address that cannot be read */
#define	KH_VAR_PROGRAM	3	/* a malformed program (a generator bug) */
#define	KH_VAR_REGISTER	4	/* a register the context does not hold */
#define	KH_VAR_DIVZERO	5	/* DW_OP_div or DW_OP_mod by zero */
#define	KH_VARS_MAGIC	0x3153524156484bULL	/* "KHVARS1" */
#define	KH_VARS_STACK	32

static volatile uint64_t *kh_vars_out;	/* the shared mapping */
static int kh_vars_mem = -1;		/* /proc/self/mem */

static void __attribute__((constructor))
kh_vars_init(void)
{
	char path[4096];
	const char *out;
	size_t len;
	void *m;
	int fd;

	out = getenv("KINST_HARNESS_OUT");
	if (out == NULL || strlen(out) + 32 >= sizeof(path))
		return;
	kh_vars_mem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
	len = (4 + KH_VARS_NSITES + (size_t)KH_VARS_NSITES * KH_VARS_NHITS *
	    KH_VARS_NREADS * 2) * sizeof(uint64_t);
	snprintf(path, sizeof(path), "%s.%ld.vars", out, (long)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (ftruncate(fd, (off_t)len) != 0) {
		close(fd);
		return;
	}
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return;
	kh_vars_out = m;
	kh_vars_out[0] = KH_VARS_MAGIC;
	kh_vars_out[1] = KH_VARS_NSITES;
	kh_vars_out[2] = KH_VARS_NREADS;
	kh_vars_out[3] = KH_VARS_NHITS;
}

/* 'size' bytes (1 to 8) at 'addr', little-endian; 0 if they cannot be read. */
static int
kh_vars_load(uint64_t addr, uint64_t size, uint64_t *v)
{
	uint8_t b[8];
	uint64_t r;
	long n;
	unsigned i;

	if (kh_vars_mem < 0 || size == 0 || size > 8 || addr >= (1ULL << 63))
		return (0);
	n = kh_isa_syscall4(SYS_pread64, kh_vars_mem, (long)b, (long)size,
	    (long)addr);
	if (n != (long)size)
		return (0);
	r = 0;
	for (i = (unsigned)size; i > 0; i--)
		r = r << 8 | b[i - 1];
	*v = r;
	return (1);
}

/* KH_OP_EXT: 'v' cut to its low (arg & 255) bits, sign-extended if arg & 256 */
static uint64_t
kh_vars_ext(uint64_t v, uint64_t arg)
{
	unsigned bits;

	bits = (unsigned)(arg & 255);
	if (bits == 0 || bits >= 64)
		return (v);
	v &= (1ULL << bits) - 1;
	if ((arg & 256) != 0 && (v >> (bits - 1)) != 0)
		v |= ~((1ULL << bits) - 1);
	return (v);
}

/* Run reading 'k' in context 'uc': KH_VAR_OK and its value, or why not. */
static uint64_t
kh_vars_eval(uint32_t k, const ucontext_t *uc, uint64_t *value)
{
	uint64_t st[KH_VARS_STACK], a, b;
	uint32_t i, end;
	int op, sp, ok;

	sp = 0;
	end = kh_vars_read_first[k] + kh_vars_read_len[k];
	for (i = kh_vars_read_first[k]; i < end; i++) {
		switch (kh_vars_op[i]) {
		case KH_OP_REG:
		case KH_OP_CONST:
		case KH_OP_LOAD:
		case KH_OP_NEG:
		case KH_OP_NOT:
		case KH_OP_EXT:
			break;
		default:	/* a binary operation */
			if (sp < 2)
				return (KH_VAR_PROGRAM);
			b = st[--sp];
			a = st[--sp];
			switch (kh_vars_op[i]) {
			case KH_OP_ADD: a += b; break;
			case KH_OP_SUB: a -= b; break;
			case KH_OP_MUL: a *= b; break;
			case KH_OP_AND: a &= b; break;
			case KH_OP_OR: a |= b; break;
			case KH_OP_XOR: a ^= b; break;
			case KH_OP_SHL: a = b < 64 ? a << b : 0; break;
			case KH_OP_SHR: a = b < 64 ? a >> b : 0; break;
			case KH_OP_SHRA:
				a = (uint64_t)((int64_t)a >> (b < 63 ? b : 63));
				break;
			case KH_OP_DIV:	/* signed, as DWARF's generic type */
				if (b == 0)
					return (KH_VAR_DIVZERO);
				if ((int64_t)b == -1)
					a = -a;
				else
					a = (uint64_t)((int64_t)a / (int64_t)b);
				break;
			case KH_OP_MOD:
				if (b == 0)
					return (KH_VAR_DIVZERO);
				a %= b;
				break;
			default:
				return (KH_VAR_PROGRAM);
			}
			st[sp++] = a;
			continue;
		}
		op = kh_vars_op[i];
		if (op == KH_OP_REG || op == KH_OP_CONST) {
			if (sp == KH_VARS_STACK)
				return (KH_VAR_PROGRAM);
			ok = 1;
			st[sp++] = op == KH_OP_CONST ? kh_vars_arg[i] :
			    kh_vars_reg(uc, kh_vars_arg[i], &ok);
			if (!ok)
				return (KH_VAR_REGISTER);
			continue;
		}
		if (sp < 1)
			return (KH_VAR_PROGRAM);
		if (kh_vars_op[i] == KH_OP_LOAD) {
			if (!kh_vars_load(st[sp - 1], kh_vars_arg[i],
			    &st[sp - 1]))
				return (KH_VAR_MEMORY);
		} else if (kh_vars_op[i] == KH_OP_NEG)
			st[sp - 1] = -st[sp - 1];
		else if (kh_vars_op[i] == KH_OP_NOT)
			st[sp - 1] = ~st[sp - 1];
		else
			st[sp - 1] = kh_vars_ext(st[sp - 1], kh_vars_arg[i]);
	}
	if (sp != 1)
		return (KH_VAR_PROGRAM);
	*value = st[0];
	return (KH_VAR_OK);
}

/* A hit at link address 'pc': record the site's readings for its first hits. */
void
kh_hit(uintptr_t pc, void *arg)
{
	const ucontext_t *uc;
	volatile uint64_t *slot;
	uint64_t hit, value, status;
	uint32_t lo, hi, mid, j;

	uc = arg;
	if (kh_vars_out == NULL)
		return;
	lo = 0;
	hi = KH_VARS_NSITES;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (kh_vars_site_pc[mid] < pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == KH_VARS_NSITES || kh_vars_site_pc[lo] != pc)
		return;
	hit = __atomic_fetch_add(&kh_vars_out[4 + lo], 1, __ATOMIC_RELAXED);
	if (hit >= KH_VARS_NHITS)
		return;
	slot = kh_vars_out + 4 + KH_VARS_NSITES +
	    ((size_t)lo * KH_VARS_NHITS + hit) * KH_VARS_NREADS * 2;
	for (j = 0; j < kh_vars_site_count[lo]; j++) {
		value = 0;
		status = kh_vars_eval(kh_vars_site_first[lo] + j, uc, &value);
		slot[2 * j] = value;
		slot[2 * j + 1] = status;
	}
}

