/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_probe.h: the harness glue's helpers that do not depend on how a probe
 * traps and resumes, shared by amd64/kinst_harness.c and
 * dbp/kinst_harness.c: the refusal and note lines, passing a trap that is
 * not ours on to the previous SIGTRAP disposition, finding a placed probe
 * by its live address, recognising the target image, installing the
 * SIGTRAP handler (kh_trap(), the glue's own), the table's functions and
 * segments at link time, and checking a mapped function against its digest
 * before the glue prepares each of its probes.  Each glue file includes it
 * once, after its globals and struct kh_inst, having defined KH_TRAP_CODE
 * (the si_code a real breakpoint instruction raises SIGTRAP with on its
 * ISA; the kernel never lets a process ignore that one); it defines
 * kh_trap() and kh_prepare_probe() after.
 */

#ifndef _KH_PROBE_H_
#define	_KH_PROBE_H_

/* The kernel's struct sigaction, for rt_sigaction(2) without libc. */
struct kh_ksigaction {
	void		(*ksa_handler)(int);
	unsigned long	ksa_flags;
	void		(*ksa_restorer)(void);
	uint64_t	ksa_mask;
};

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

static void	kh_dump(void);

/*
 * A trap that is not ours: hand it to whoever had SIGTRAP before us.  A
 * handler is called as the kernel would have; an ignored signal stays
 * ignored unless it came from a real breakpoint (which the kernel never lets
 * a process ignore); the default action is restored and the signal raised
 * again, to be delivered as soon as this handler returns.
 */
static void __attribute__((noinline))
kh_pass_on(int sig, siginfo_t *si, void *uc)
{
	struct kh_ksigaction dfl;

	if ((kh_oldact.sa_flags & SA_SIGINFO) != 0 &&
	    kh_oldact.sa_sigaction != NULL) {
		kh_oldact.sa_sigaction(sig, si, uc);
		return;
	}
	if (kh_oldact.sa_handler != SIG_DFL && kh_oldact.sa_handler != SIG_IGN) {
		kh_oldact.sa_handler(sig);
		return;
	}
	if (kh_oldact.sa_handler == SIG_IGN && si->si_code != KH_TRAP_CODE)
		return;
	/* The default action ends the process: report first. */
	kh_dump();
	dfl.ksa_handler = SIG_DFL;
	dfl.ksa_flags = 0;
	dfl.ksa_restorer = NULL;
	dfl.ksa_mask = 0;
	kh_syscall4(SYS_rt_sigaction, sig, (long)&dfl, 0, sizeof(dfl.ksa_mask));
	kh_syscall4(SYS_tgkill, kh_syscall4(SYS_getpid, 0, 0, 0, 0),
	    kh_syscall4(SYS_gettid, 0, 0, 0, 0), sig, 0);
}

/* The table index of the probe placed at live address 'pc', or -1. */
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

static void	kh_trap(int, siginfo_t *, void *);
static const char	*kh_prepare_probe(struct kh_inst *, uint32_t, uintptr_t,
	    char *, size_t);

static const struct kh_segment *
kh_segment_of(uintptr_t link)
{
	int i;

	for (i = 0; i < KH_NSEGMENTS; i++) {
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
	sa.sa_sigaction = kh_trap;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	if (sigaction(SIGTRAP, &sa, &kh_oldact) == 0)
		kh_handler_set = 1;
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
 * from them and the ISA glue prepares it (kh_prepare_probe()).
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
	uint8_t *copy;
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
			snprintf(why, sizeof(why), "the record of %s:%u contradicts "
			    "the live instruction", kf.kf_name, kin.ki_off);
			kh_refuse(ki, kin.ki_probe, why);
			continue;
		}
		reason = kh_prepare_probe(ki, kin.ki_probe, base + kin.ki_off,
		    why, sizeof(why));
		if (reason != NULL) {
			kh_refuse(ki, kin.ki_probe, reason);
			continue;
		}
		ki->ki_state[kin.ki_probe] = KH_S_READY;
	}
}

#endif /* !_KH_PROBE_H_ */
