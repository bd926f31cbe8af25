/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_harness.c: user-space glue that runs kinstkit's kinst core on real
 * code, the machine-independent part.  The ISA's portable core
 * (sys/modules/kinst/<arch>/kinst_core.c, and dbp/kinst_core_dbp.c on arm64
 * and riscv) and the same generated kinst_table.c that go into kinst.ko are
 * compiled with this file, the ISA part (kh_isa.h says what it is) and the
 * generated kinst_harness_target.c (kh_target.h) into an rtld audit library
 * (LD_AUDIT), by generator/run/harness.py; for arm64 and riscv with the
 * cross compiler, the programs running under qemu-user.
 *
 * - la_objopen() sees every object as soon as rtld maps it, before its
 *   relocations and constructors run: the program, the libraries it needs at
 *   startup and the ones dlopen() loads later.  When the object is the image
 *   the table is placed in (kh_target), every table function's live bytes
 *   are checked against its digest (kinst_core_digest_ok), each probe's
 *   metadata is derived from the live instruction (kinst_core_derive), its
 *   static trampoline filled once (kh_isa_prepare()) and its breakpoint
 *   written (kh_isa_patch()).  The table may have been made from another
 *   build of the same code (harness --table-from): functions are placed by
 *   name and size, the way the module glue finds a table's functions in a
 *   linker file.
 * - The ISA's SIGTRAP handler (kh_isa_trap()) finds the probe by its live
 *   address (kh_probe_at()), counts the hit and resumes through the
 *   trampoline or an emulation.  A trap that is not ours is passed on to
 *   the previous disposition (kh_pass_on()).  Like kinst in probe context,
 *   the handler calls nothing but the core and raw system calls: never libc,
 *   never anything that could itself be probed (the image may be libc).
 * - Hits are counted in a shared file mapping, "$KINST_HARNESS_OUT.<pid>.hits";
 *   placements, refusals and load biases go to "$KINST_HARNESS_OUT.<pid>"
 *   when the image is patched, and again at exit and when it is closed.
 *
 * KINST_HARNESS_MODE=locate only records where the image was mapped: no
 * patching, no handler.  The runner uses it for the independent count
 * (valgrind's callgrind, loading the library with LD_PRELOAD there: see
 * kh_fini(); QEMU's own log of what it executes), and the hit counts must
 * equal it.
 */

#define	_GNU_SOURCE
#include <sys/types.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kinst_core.h"
#include "kh_isa.h"
#include "kh_target.h"

#define	KH_EXPORT	__attribute__((visibility("default")))

struct kh_inst		kh_insts[KH_MAX_INST];
volatile int		kh_ninst;	/* published with release order */
uint64_t		*kh_hits;	/* per entry, all copies; shared */

static int kh_locate;			/* KINST_HARNESS_MODE=locate */
static int kh_audited;			/* loaded by LD_AUDIT */
static int kh_handler_set;
static struct sigaction kh_oldact;
static dev_t kh_target_dev;
static ino_t kh_target_ino;
static int kh_target_known = -1;	/* -1: not looked up yet */
static char *kh_refusals;		/* "refused ..." lines */
static size_t kh_refusals_len, kh_refusals_cap;
static char kh_out_path[4000];		/* $KINST_HARNESS_OUT */
static char *kh_notes;			/* "note ..." lines */
static size_t kh_notes_len, kh_notes_cap;

static void	kh_dump(void);

/* The kernel's struct sigaction, for rt_sigaction(2) without libc. */
struct kh_ksigaction {
	void		(*ksa_handler)(int);
	unsigned long	ksa_flags;
	void		(*ksa_restorer)(void);
	uint64_t	ksa_mask;
};

/* ---------------------------------------------------------------------
 * Refusals and notes, collected for the report.
 */

static void
kh_append(char **buf, size_t *len, size_t *cap, const char *line)
{
	size_t n;
	char *nb;

	n = strlen(line);
	if (*len + n + 1 > *cap) {
		*cap = (*cap + n + 1) * 2;
		nb = realloc(*buf, *cap);
		if (nb == NULL)
			return;
		*buf = nb;
	}
	memcpy(*buf + *len, line, n + 1);
	*len += n;
}

static void
kh_refuse(struct kh_inst *ki, uint32_t idx, const char *why)
{
	char line[512];

	ki->ki_state[idx] = KH_S_REFUSED;
	snprintf(line, sizeof(line), "refused %u %d %s\n", idx,
	    (int)(ki - kh_insts), why);
	kh_append(&kh_refusals, &kh_refusals_len, &kh_refusals_cap, line);
}

static void
kh_note(const char *fmt, const char *arg)
{
	char line[512];

	snprintf(line, sizeof(line), fmt, arg);
	kh_append(&kh_notes, &kh_notes_len, &kh_notes_cap, line);
}

static void
kh_hexbytes(char *out, size_t outlen, const volatile uint8_t *p, unsigned n)
{
	size_t o;
	unsigned i;

	o = 0;
	out[0] = '\0';
	for (i = 0; i < n && o + 4 < outlen; i++)
		o += (size_t)snprintf(out + o, outlen - o, i ? " %02x" : "%02x",
		    p[i]);
}

/* ---------------------------------------------------------------------
 * What the ISA's breakpoint handler calls: probe context.
 */

/* The table index of the probe placed at live address 'pc' in 'ki', or -1. */
static long
kh_site_find(const struct kh_inst *ki, uintptr_t pc)
{
	uint32_t lo, hi, mid;

	lo = 0;
	hi = ki->ki_nsites;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (ki->ki_sites[mid].ks_addr == pc)
			return ((long)ki->ki_sites[mid].ks_probe);
		if (ki->ki_sites[mid].ks_addr < pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (-1);
}

/* kh_isa.h: nothing, unless an optional part of the library replaces it. */
__attribute__((weak)) void
kh_hit(uintptr_t pc, void *uc)
{

	(void)pc;
	(void)uc;
}

/* kh_isa.h: no jump probes, unless the optional jump part is built in. */
__attribute__((weak)) size_t
kh_jump_room(uint32_t nprobes)
{

	(void)nprobes;
	return (0);
}

__attribute__((weak)) void
kh_jump_prepare(struct kh_inst *ki)
{

	(void)ki;
}

__attribute__((weak)) uint32_t
kh_jump_place(struct kh_inst *ki, uint32_t probe, uintptr_t live)
{

	(void)ki;
	(void)probe;
	(void)live;
	return (0);
}

long
kh_probe_at(uintptr_t pc, struct kh_inst **kip)
{
	struct kh_inst *ki;
	long idx;
	int i;

	for (i = __atomic_load_n(&kh_ninst, __ATOMIC_ACQUIRE) - 1; i >= 0;
	    i--) {
		ki = &kh_insts[i];
		if (pc - ki->ki_lo >= ki->ki_hi - ki->ki_lo)
			continue;
		idx = kh_site_find(ki, pc);
		if (idx >= 0 && ki->ki_state[idx] == KH_S_PLACED) {
			*kip = ki;
			return (idx);
		}
	}
	return (-1);
}

/*
 * A trap that is not ours: hand it to whoever had SIGTRAP before us.  A
 * handler is called as the kernel would have; an ignored signal stays
 * ignored unless it came from a real breakpoint (which the kernel never lets
 * a process ignore); the default action is restored and the signal raised
 * again, to be delivered as soon as this handler returns.
 */
void __attribute__((noinline))
kh_pass_on(int sig, siginfo_t *si, void *uc)
{
	struct kh_ksigaction dfl;

	if ((kh_oldact.sa_flags & SA_SIGINFO) != 0 &&
	    kh_oldact.sa_sigaction != NULL) {
		kh_oldact.sa_sigaction(sig, si, uc);
		return;
	}
	if (kh_oldact.sa_handler != SIG_DFL &&
	    kh_oldact.sa_handler != SIG_IGN) {
		kh_oldact.sa_handler(sig);
		return;
	}
	if (kh_oldact.sa_handler == SIG_IGN && si->si_code != kh_isa_trap_code)
		return;
	/* The default action ends the process: report first. */
	kh_dump();
	dfl.ksa_handler = SIG_DFL;
	dfl.ksa_flags = 0;
	dfl.ksa_restorer = NULL;
	dfl.ksa_mask = 0;
	kh_isa_syscall4(SYS_rt_sigaction, sig, (long)&dfl, 0,
	    sizeof(dfl.ksa_mask));
	kh_isa_syscall4(SYS_tgkill, kh_isa_syscall4(SYS_getpid, 0, 0, 0, 0),
	    kh_isa_syscall4(SYS_gettid, 0, 0, 0, 0), sig, 0);
}

/* ---------------------------------------------------------------------
 * Placing a copy's probes.
 */

/* Is 'name' (an rtld path; "" for the program) the image the table is in? */
static int
kh_is_target(const char *name)
{
	struct stat st;

	if (kh_target_known < 0) {
		kh_target_known = stat(kh_target, &st) == 0;
		if (kh_target_known) {
			kh_target_dev = st.st_dev;
			kh_target_ino = st.st_ino;
		}
	}
	if (!kh_target_known)
		return (0);
	if (name == NULL || name[0] == '\0')
		name = "/proc/self/exe";	/* the program itself */
	if (stat(name, &st) != 0)
		return (0);
	return (st.st_dev == kh_target_dev && st.st_ino == kh_target_ino);
}

static const struct kh_segment *
kh_segment_of(uintptr_t link)
{
	int i;

	for (i = 0; i < kh_nsegments; i++) {
		if (link - kh_segments[i].ks_vaddr < kh_segments[i].ks_memsz)
			return (&kh_segments[i]);
	}
	return (NULL);
}

static void
kh_install_handler(void)
{
	struct sigaction sa;

	if (kh_handler_set)
		return;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = kh_isa_trap;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	if (sigaction(SIGTRAP, &sa, &kh_oldact) == 0)
		kh_handler_set = 1;
}

/* Where table function 'f' is in the target at link time (0: not there). */
static uintptr_t
kh_func_addr(uint32_t f)
{
	const uint8_t *p;
	uint64_t v;
	int i;

	p = kh_func_addr_blob + (size_t)f * 8;
	v = 0;
	for (i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return ((uintptr_t)v);
}

/* Refuse every probe of function 'kf' in copy 'ki'. */
static void
kh_refuse_func(struct kh_inst *ki, const struct kinst_func *kf, const char *why)
{
	uint32_t i;

	for (i = 0; i < kf->kf_nprobes; i++)
		kh_refuse(ki, kf->kf_first + i, why);
}

static int
kh_site_cmp(const void *a, const void *b)
{
	const struct kh_site *x, *y;

	x = a;
	y = b;
	return (x->ks_addr < y->ks_addr ? -1 : x->ks_addr > y->ks_addr);
}

/*
 * Check one function of a freshly mapped copy and make its probes: its live
 * bytes must have the table's digest, then each probe's metadata is derived
 * from them and the ISA part fills its trampoline (kh_isa_prepare()).
 */
static void
kh_prepare_func(struct kh_inst *ki, uint32_t f)
{
	struct kinst_func kf;
	struct kinst_walk kw;
	struct kinst_insn kin;
	const struct kh_segment *seg;
	const char *reason;
	char why[512];
	uint8_t *copy, *tramp;
	uintptr_t link, base;
	int err;

	kinst_func_get(&kinst_table, f, &kf);
	if (kf.kf_nprobes == 0)
		return;
	link = kh_func_addr(f);
	if (link == 0) {
		kh_refuse_func(ki, &kf, "function absent from the target");
		return;
	}
	seg = kh_segment_of(link);
	if (seg == NULL || (seg->ks_prot & PROT_EXEC) == 0 ||
	    link + kf.kf_size > seg->ks_vaddr + seg->ks_memsz) {
		kh_refuse_func(ki, &kf, "not in an executable segment");
		return;
	}
	base = link + ki->ki_bias;
	copy = malloc(kf.kf_size > 0 ? kf.kf_size : 1);
	if (copy == NULL) {
		kh_refuse_func(ki, &kf, "out of memory");
		return;
	}
	memcpy(copy, (const void *)base, kf.kf_size);
	err = kinst_core_digest_ok(&kinst_table, &kf, copy);
	if (err != 0) {
		snprintf(why, sizeof(why), err == KINST_E_BYTES ?
		    "digest: the live bytes of %s differ from the table's" :
		    "its table records are malformed (%s)", kf.kf_name);
		kh_refuse_func(ki, &kf, why);
		free(copy);
		return;
	}
	/*
	 * Derive from the live bytes themselves: the digest masked the
	 * relocated fields in 'copy'.
	 */
	free(copy);
	kinst_core_walk(&kinst_table, &kf, &kw);
	while (kinst_core_next(&kw, &kin) > 0) {
		if (kin.ki_kind == KINST_R_REFUSED)
			continue;
		err = kinst_core_derive(&kin,
		    (const volatile kc_uint8_t *)(base + kin.ki_off),
		    &ki->ki_md[kin.ki_probe]);
		if (err != 0) {
			snprintf(why, sizeof(why), "the record of %s:%u "
			    "contradicts the live instruction", kf.kf_name,
			    kin.ki_off);
			kh_refuse(ki, kin.ki_probe, why);
			continue;
		}
		ki->ki_addr[kin.ki_probe] = base + kin.ki_off;
		tramp = ki->ki_tramp == NULL ? NULL :
		    ki->ki_tramp + (uintptr_t)kin.ki_probe * KINST_TRAMP_SIZE;
		reason = kh_isa_prepare(&ki->ki_md[kin.ki_probe],
		    base + kin.ki_off, tramp, why, sizeof(why));
		if (reason != NULL) {
			kh_refuse(ki, kin.ki_probe, reason);
			continue;
		}
		ki->ki_state[kin.ki_probe] = KH_S_READY;
	}
}

/* Refuse every ready probe of 'ki' (if 'tramped', those with a trampoline). */
static void
kh_refuse_ready(struct kh_inst *ki, int tramped, const char *why)
{
	uint32_t i;

	for (i = 0; i < kinst_table.kt_nprobes; i++) {
		if (ki->ki_state[i] == KH_S_READY &&
		    (!tramped || kh_isa_tramped(&ki->ki_md[i])))
			kh_refuse(ki, i, why);
	}
}

/* The handler's index: every probe ready to be placed, by live address. */
static void
kh_index_sites(struct kh_inst *ki)
{
	struct kinst_func kf;
	struct kinst_walk kw;
	struct kinst_insn kin;
	uint32_t f;

	for (f = 0; f < kinst_table.kt_nfuncs; f++) {
		kinst_func_get(&kinst_table, f, &kf);
		kinst_core_walk(&kinst_table, &kf, &kw);
		while (kinst_core_next(&kw, &kin) > 0) {
			if (kin.ki_kind == KINST_R_REFUSED ||
			    ki->ki_state[kin.ki_probe] != KH_S_READY)
				continue;
			ki->ki_sites[ki->ki_nsites].ks_addr = kh_func_addr(f) +
			    ki->ki_bias + kin.ki_off;
			ki->ki_sites[ki->ki_nsites++].ks_probe = kin.ki_probe;
		}
	}
	qsort(ki->ki_sites, ki->ki_nsites, sizeof(*ki->ki_sites), kh_site_cmp);
}

/* Write the breakpoints of segment 's', writable only meanwhile. */
static void
kh_patch_segment(struct kh_inst *ki, int s, uintptr_t pg)
{
	const struct kh_site *ks;
	char why[256];
	uintptr_t start, end;
	uint32_t i, n;

	start = (kh_segments[s].ks_vaddr + ki->ki_bias) & ~(pg - 1);
	end = (kh_segments[s].ks_vaddr + kh_segments[s].ks_memsz +
	    ki->ki_bias + pg - 1) & ~(pg - 1);
	if (mprotect((void *)start, end - start, kh_segments[s].ks_prot |
	    PROT_WRITE) != 0)
		snprintf(why, sizeof(why), "mprotect of the text: %s",
		    strerror(errno));
	else
		why[0] = '\0';
	for (i = 0; i < ki->ki_nsites; i++) {
		ks = &ki->ki_sites[i];
		if (ki->ki_state[ks->ks_probe] != KH_S_READY ||
		    kh_segment_of(ks->ks_addr - ki->ki_bias) != &kh_segments[s])
			continue;
		if (why[0] != '\0') {
			kh_refuse(ki, ks->ks_probe, why);
			continue;
		}
		n = kh_jump_place(ki, ks->ks_probe, ks->ks_addr);
		if (n > 0) {
			ki->ki_jumps++;
			ki->ki_jumped += n;
			ki->ki_placed += n;
			continue;
		}
		/* Ours before its breakpoint can fire. */
		__atomic_store_n(&ki->ki_state[ks->ks_probe], KH_S_PLACED,
		    __ATOMIC_RELEASE);
		kh_isa_patch(&ki->ki_md[ks->ks_probe], ks->ks_addr);
		ki->ki_placed++;
	}
	if (why[0] == '\0')
		mprotect((void *)start, end - start, kh_segments[s].ks_prot);
}

/* Every probe of one freshly mapped copy: check, fill, then patch. */
static void
kh_place(struct kh_inst *ki)
{
	const struct kinst_table *kt;
	uintptr_t pg;
	size_t tlen;
	uint32_t f, i;
	int s;

	kt = &kinst_table;
	tlen = (size_t)kt->kt_nprobes * KINST_TRAMP_SIZE +
	    kh_jump_room(kt->kt_nprobes);
	ki->ki_tramp = kh_isa_tramp_alloc(kh_image_lo + ki->ki_bias,
	    kh_image_hi + ki->ki_bias, tlen);
	ki->ki_md = calloc(kt->kt_nprobes, sizeof(*ki->ki_md));
	ki->ki_addr = calloc(kt->kt_nprobes, sizeof(*ki->ki_addr));
	ki->ki_sites = calloc(kt->kt_nprobes, sizeof(*ki->ki_sites));
	if (ki->ki_md == NULL || ki->ki_addr == NULL || ki->ki_sites == NULL) {
		for (i = 0; i < kt->kt_nprobes; i++)
			kh_refuse(ki, i, "out of memory");
		return;
	}
	for (f = 0; f < kt->kt_nfuncs; f++)
		kh_prepare_func(ki, f);
	if (ki->ki_tramp != NULL)
		kh_jump_prepare(ki);
	pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	if (ki->ki_tramp != NULL) {
		__builtin___clear_cache((char *)ki->ki_tramp,
		    (char *)ki->ki_tramp + tlen);
		if (mprotect(ki->ki_tramp, (tlen + pg - 1) & ~(pg - 1),
		    PROT_READ | PROT_EXEC) != 0)
			kh_refuse_ready(ki, 1,
			    "mprotect of the trampolines failed");
	}
	kh_install_handler();
	if (!kh_handler_set) {
		kh_refuse_ready(ki, 0, "sigaction(SIGTRAP) failed");
		return;
	}
	kh_index_sites(ki);
	for (s = 0; s < kh_nsegments; s++) {
		if ((kh_segments[s].ks_prot & PROT_EXEC) != 0)
			kh_patch_segment(ki, s, pg);
	}
	__builtin___clear_cache((char *)(kh_image_lo + ki->ki_bias),
	    (char *)(kh_image_hi + ki->ki_bias));
}

/* ---------------------------------------------------------------------
 * The report and the hit counters.
 */

static int
kh_build_id_ok(uintptr_t bias)
{
	const uint8_t *p;
	char live[128], want[128], why[400];
	size_t i;

	if (kh_build_id_len == 0 || kh_segment_of(kh_build_id_vaddr) == NULL)
		return (1);	/* none, or not in a loaded segment */
	p = (const uint8_t *)(kh_build_id_vaddr + bias);
	for (i = 0; i < kh_build_id_len; i++) {
		if (p[i] != kh_build_id[i]) {
			kh_hexbytes(live, sizeof(live), p, kh_build_id_len);
			kh_hexbytes(want, sizeof(want), kh_build_id,
			    kh_build_id_len);
			snprintf(why, sizeof(why), "build-id %s, table %s",
			    live, want);
			kh_note("note build-id mismatch: %s\n", why);
			return (0);
		}
	}
	return (1);
}

/*
 * The report, written with raw system calls and no libc: it also runs in
 * probe context, just before a foreign trap's default action ends the
 * process (kh_pass_on).
 */
struct kh_out {
	char	ko_buf[4096];
	size_t	ko_len;
	int	ko_fd;
};

static void
kh_flush(struct kh_out *o)
{
	size_t done;
	long n;

	for (done = 0; done < o->ko_len; done += (size_t)n) {
		n = kh_isa_syscall4(SYS_write, o->ko_fd,
		    (long)(o->ko_buf + done), (long)(o->ko_len - done), 0);
		if (n <= 0)
			break;
	}
	o->ko_len = 0;
}

static void
kh_puts(struct kh_out *o, const char *s, size_t n)
{

	while (n-- > 0) {
		if (o->ko_len == sizeof(o->ko_buf))
			kh_flush(o);
		o->ko_buf[o->ko_len++] = *s++;
	}
}

static void
kh_putstr(struct kh_out *o, const char *s)
{
	size_t n;

	for (n = 0; s[n] != '\0'; n++)
		continue;
	kh_puts(o, s, n);
}

static void
kh_putnum(struct kh_out *o, uint64_t v, int hex)
{
	char d[24];
	int i;

	i = sizeof(d);
	do {
		d[--i] = "0123456789abcdef"[v % (hex ? 16 : 10)];
		v /= hex ? 16 : 10;
	} while (v != 0);
	if (hex) {
		d[--i] = 'x';
		d[--i] = '0';
	}
	kh_puts(o, d + i, sizeof(d) - (size_t)i);
}

static void
kh_dump(void)
{
	struct kh_out o;
	char path[sizeof(kh_out_path) + 24];
	uint64_t pid;
	size_t n;
	int k;

	if (kh_out_path[0] == '\0' || kh_ninst == 0)
		return;
	pid = (uint64_t)kh_isa_syscall4(SYS_getpid, 0, 0, 0, 0);
	o.ko_len = 0;
	o.ko_fd = -1;
	kh_putstr(&o, kh_out_path);
	kh_puts(&o, ".", 1);
	kh_putnum(&o, pid, 0);
	for (n = 0; n < o.ko_len; n++)
		path[n] = o.ko_buf[n];
	path[n] = '\0';
	o.ko_len = 0;
	o.ko_fd = (int)kh_isa_syscall4(SYS_openat, AT_FDCWD, (long)path,
	    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (o.ko_fd < 0)
		return;
	kh_putstr(&o, "kinst-harness 1\npid ");
	kh_putnum(&o, pid, 0);
	kh_putstr(&o, kh_locate ? "\nmode locate\nentries " :
	    "\nmode probe\nentries ");
	kh_putnum(&o, kinst_table.kt_nprobes, 0);
	kh_putstr(&o, "\n");
	for (k = 0; k < kh_ninst; k++) {
		kh_putstr(&o, "instance ");
		kh_putnum(&o, (uint64_t)k, 0);
		kh_putstr(&o, " bias ");
		kh_putnum(&o, kh_insts[k].ki_bias, 1);
		kh_putstr(&o, " tramp ");
		kh_putnum(&o, (uintptr_t)kh_insts[k].ki_tramp, 1);
		kh_putstr(&o, " placed ");
		kh_putnum(&o, kh_insts[k].ki_placed, 0);
		kh_putstr(&o, " closed ");
		kh_putnum(&o, (uint64_t)kh_insts[k].ki_closed, 0);
		kh_putstr(&o, "\n");
		if (kh_insts[k].ki_jumps == 0)
			continue;
		kh_putstr(&o, "jumps ");
		kh_putnum(&o, (uint64_t)k, 0);
		kh_putstr(&o, " sites ");
		kh_putnum(&o, kh_insts[k].ki_jumps, 0);
		kh_putstr(&o, " probes ");
		kh_putnum(&o, kh_insts[k].ki_jumped, 0);
		kh_putstr(&o, "\n");
	}
	if (kh_notes != NULL)
		kh_puts(&o, kh_notes, kh_notes_len);
	if (kh_refusals != NULL)
		kh_puts(&o, kh_refusals, kh_refusals_len);
	kh_putstr(&o, "end\n");
	kh_flush(&o);
	kh_isa_syscall4(SYS_close, o.ko_fd, 0, 0, 0);
}

/*
 * The hit counters live in a shared file mapping,
 * "$KINST_HARNESS_OUT.<pid>.hits"
 * (one little-endian uint64 per table entry): a forked child counts into
 * its parent's file, and no count is lost when a process ends without
 * running its destructors (_exit, a fatal signal).
 */
static uint64_t *
kh_hits_map(size_t len)
{
	char path[sizeof(kh_out_path) + 32];
	void *m;
	int fd;

	if (kh_out_path[0] == '\0') {
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED |
		    MAP_ANONYMOUS, -1, 0);
		return (m == MAP_FAILED ? NULL : m);
	}
	snprintf(path, sizeof(path), "%s.%ld.hits", kh_out_path,
	    (long)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return (NULL);
	if (ftruncate(fd, (off_t)len) != 0) {
		close(fd);
		return (NULL);
	}
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return (m == MAP_FAILED ? NULL : m);
}

/* ---------------------------------------------------------------------
 * The rtld audit interface.
 */

KH_EXPORT unsigned int
la_version(unsigned int version)
{
	const char *mode, *out;

	kh_audited = 1;
	mode = getenv("KINST_HARNESS_MODE");
	kh_locate = mode != NULL && strcmp(mode, "locate") == 0;
	out = getenv("KINST_HARNESS_OUT");
	if (out != NULL && strlen(out) < sizeof(kh_out_path))
		strcpy(kh_out_path, out);
	return (version < LAV_CURRENT ? version : LAV_CURRENT);
}

KH_EXPORT unsigned int
la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie)
{
	struct kh_inst *ki;
	size_t n, pg;
	uint32_t i;
	int s;

	(void)lmid;
	*cookie = 0;
	if (!kh_is_target(map->l_name))
		return (0);
	if (kh_ninst >= KH_MAX_INST) {
		kh_note("note %s mapped again, past the copies the harness "
		    "tracks; left unprobed\n", kh_target);
		return (0);
	}
	pg = (size_t)sysconf(_SC_PAGESIZE);
	n = kinst_table.kt_nprobes;
	if (kh_hits == NULL && n > 0 && !kh_locate) {
		kh_hits = kh_hits_map(n * sizeof(uint64_t));
		if (kh_hits == NULL)
			return (0);
	}
	ki = &kh_insts[kh_ninst];
	ki->ki_bias = (uintptr_t)map->l_addr;
	ki->ki_lo = ~(uintptr_t)0;
	ki->ki_hi = 0;
	for (s = 0; s < kh_nsegments; s++) {
		if ((kh_segments[s].ks_prot & PROT_EXEC) == 0)
			continue;
		if (kh_segments[s].ks_vaddr + ki->ki_bias < ki->ki_lo)
			ki->ki_lo = kh_segments[s].ks_vaddr + ki->ki_bias;
		if (kh_segments[s].ks_vaddr + kh_segments[s].ks_memsz +
		    ki->ki_bias > ki->ki_hi)
			ki->ki_hi = kh_segments[s].ks_vaddr +
			    kh_segments[s].ks_memsz + ki->ki_bias;
	}
	if (ki->ki_hi < ki->ki_lo)
		ki->ki_lo = ki->ki_hi = 0;
	ki->ki_state = n == 0 ? NULL : mmap(NULL, (n + pg - 1) & ~(pg - 1),
	    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ki->ki_state == MAP_FAILED)
		return (0);
	*cookie = (uintptr_t)ki;
	if (!kh_build_id_ok(ki->ki_bias)) {
		for (i = 0; i < n; i++)
			kh_refuse(ki, i, "build-id of the mapped image differs "
			    "from the table's");
		__atomic_store_n(&kh_ninst, kh_ninst + 1, __ATOMIC_RELEASE);
		kh_dump();
		return (0);
	}
	if (kh_locate || n == 0) {
		__atomic_store_n(&kh_ninst, kh_ninst + 1, __ATOMIC_RELEASE);
		kh_dump();
		return (0);
	}
	/* Published before the first breakpoint, so the handler can find it. */
	__atomic_store_n(&kh_ninst, kh_ninst + 1, __ATOMIC_RELEASE);
	kh_place(ki);
	kh_dump();	/* now, in case the process never exits normally */
	return (0);
}

/*
 * The image is going away (dlclose, or exit after its destructors ran).  Its
 * probes stay as they are: a thread that already trapped on one still finds
 * it, and an unmapped copy cannot trap again.  Record the counts so far.
 */
KH_EXPORT unsigned int
la_objclose(uintptr_t *cookie)
{
	struct kh_inst *ki;

	ki = (struct kh_inst *)*cookie;
	if (ki == NULL)
		return (0);
	ki->ki_closed = 1;
	kh_dump();
	return (0);
}

/*
 * Loaded with LD_PRELOAD instead (the runner does so under valgrind, where a
 * second libc in an audit namespace would blur callgrind's symbols): locate
 * mode only, and the load bias is looked up at exit.
 */
static int
kh_locate_one(struct dl_phdr_info *info, size_t size, void *arg)
{

	(void)size;
	(void)arg;
	if (kh_ninst < KH_MAX_INST && kh_is_target(info->dlpi_name)) {
		kh_insts[kh_ninst].ki_bias = (uintptr_t)info->dlpi_addr;
		kh_ninst++;
	}
	return (0);
}

static void __attribute__((destructor))
kh_fini(void)
{
	const char *mode, *out;

	if (!kh_audited) {
		mode = getenv("KINST_HARNESS_MODE");
		out = getenv("KINST_HARNESS_OUT");
		if (mode == NULL || strcmp(mode, "locate") != 0 ||
		    out == NULL || strlen(out) >= sizeof(kh_out_path))
			return;
		strcpy(kh_out_path, out);
		kh_locate = 1;
		dl_iterate_phdr(kh_locate_one, NULL);
	}
	kh_dump();
}
