/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_audit.h: the part of the harness glue that does not depend on how a
 * probe traps and resumes, shared by amd64/kinst_harness.c (int3 and a
 * jump back) and dbp/kinst_harness.c (arm64 and riscv's double breakpoint):
 * the build-id check, the report and hit-counter files, and the rtld audit
 * entry points.  Each glue file includes it once, at its end, after
 * defining what it uses: struct kh_inst (ki_bias, ki_lo, ki_hi, ki_tramp,
 * ki_state, ki_placed, ki_closed), kh_insts, kh_ninst, kh_hits, kh_locate,
 * kh_audited, kh_out_path, the notes and refusals buffers, kh_segments,
 * kh_syscall4(), kh_is_target(), kh_note(), kh_refuse(), kh_hexbytes() and
 * kh_place().
 */

#ifndef _KH_AUDIT_H_
#define	_KH_AUDIT_H_

static int
kh_build_id_ok(uintptr_t bias)
{
#ifdef KH_HAVE_BUILD_ID
	const uint8_t *p;
	char live[128], want[128], why[400];
	size_t i;

	if (kh_segment_of(kh_build_id_vaddr) == NULL)
		return (1);	/* not in a loaded segment: nothing to read */
	p = (const uint8_t *)(kh_build_id_vaddr + bias);
	for (i = 0; i < sizeof(kh_build_id); i++) {
		if (p[i] != kh_build_id[i]) {
			kh_hexbytes(live, sizeof(live), p, sizeof(kh_build_id));
			kh_hexbytes(want, sizeof(want), kh_build_id,
			    sizeof(kh_build_id));
			snprintf(why, sizeof(why), "build-id %s, table %s", live, want);
			kh_note("note build-id mismatch: %s\n", why);
			return (0);
		}
	}
#else
	(void)bias;
#endif
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
		n = kh_syscall4(SYS_write, o->ko_fd, (long)(o->ko_buf + done),
		    (long)(o->ko_len - done), 0);
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
	pid = (uint64_t)kh_syscall4(SYS_getpid, 0, 0, 0, 0);
	o.ko_len = 0;
	o.ko_fd = -1;
	kh_putstr(&o, kh_out_path);
	kh_puts(&o, ".", 1);
	kh_putnum(&o, pid, 0);
	for (n = 0; n < o.ko_len; n++)
		path[n] = o.ko_buf[n];
	path[n] = '\0';
	o.ko_len = 0;
	o.ko_fd = (int)kh_syscall4(SYS_openat, AT_FDCWD, (long)path,
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
	}
	if (kh_notes != NULL)
		kh_puts(&o, kh_notes, kh_notes_len);
	if (kh_refusals != NULL)
		kh_puts(&o, kh_refusals, kh_refusals_len);
	kh_putstr(&o, "end\n");
	kh_flush(&o);
	kh_syscall4(SYS_close, o.ko_fd, 0, 0, 0);
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
	snprintf(path, sizeof(path), "%s.%ld.hits", kh_out_path, (long)getpid());
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
	for (s = 0; s < KH_NSEGMENTS; s++) {
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
		if (mode == NULL || strcmp(mode, "locate") != 0 || out == NULL ||
		    strlen(out) >= sizeof(kh_out_path))
			return;
		strcpy(kh_out_path, out);
		kh_locate = 1;
		dl_iterate_phdr(kh_locate_one, NULL);
	}
	kh_dump();
}

#endif /* !_KH_AUDIT_H_ */
