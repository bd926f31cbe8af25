/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_oracle.c: the independent hit counter of `vm-test --guest linux`, a
 * QEMU TCG plugin (QEMU 7.2's plugin API, qemu-plugin.h from Debian's qemu
 * source package).  It shares nothing with the module it checks: it is told
 * the probes' addresses and the two marker encodings, and counts what the
 * emulated CPUs execute.
 *
 * At translation, every instruction at a probed address gets an execution
 * callback; so does a marker instruction ("nopl DISP(%rax)" with the arm or
 * disarm DISP) in kernel space.  The arm marker opens a window, the disarm
 * marker closes it; the module runs both under stop_machine(), with every
 * other CPU spinning in its own code, so that no probed instruction runs
 * while the window changes.  Per probe it counts:
 *
 * - executions inside a window whose bytes, as translated, start with int3
 *   (the module's breakpoint: each should be one hit);
 * - executions inside a window of anything else (a probe the module claims
 *   armed but that ran its original instruction);
 * - executions of an int3 there outside every window (a breakpoint left
 *   behind, or written outside the window);
 * - executions there of a "jmp rel32" (0xe9), inside the windows and
 *   outside them, apart: a jump probe's jump, or the original instruction
 *   where that is a jmp rel32 (the plugin does not know which; the host
 *   judges, from the probe's original bytes).
 *
 * A breakpoint probe's hits must equal the first, and the rest must be
 * zero; a jump probe's hits equal the int3 and jmp executions inside the
 * windows together (its jump is placed from a breakpoint, and removed
 * through one).
 * QEMU retranslates code whose page is written, through any mapping, so the
 * bytes seen at translation are those executed.
 *
 * It also keeps, per vCPU, the probe whose int3 it ran last: after a crash
 * that names the probe most likely at fault.
 *
 * A probe may also be given relative to an anchor: a third marker ("nopl
 * DISP(%rax)" with the anchor DISP) that the guest's target module runs
 * when it loads, at the start of its probed code.  A module lands where the
 * kernel puts it, so the plugin takes the anchor's address, as translated,
 * for the base of those probes; the target's code runs only after its
 * loader has run the anchor.
 *
 * Arguments: probes=FILE (one hexadecimal address per line, any order, or
 * "+OFFSET" from the anchor), out=FILE (written at exit: "windows N", ...,
 * then "index inside other stray jin jout" per probe, in the input order),
 * arm=DISP, disarm=DISP, anchor=DISP (decimal).
 */

#define	_GNU_SOURCE	/* asprintf() */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define	KO_UNUSED	__attribute__((unused))
#define	KO_INT3		0xcc
#define	KO_JMP32	0xe9
#define	KO_KERNEL	0xffff800000000000ULL	/* kernel half of the address space */

struct ko_site {
	uint64_t	ks_addr;
	uint32_t	ks_index;	/* line of the probes file */
};

struct ko_count {
	uint64_t	kc_inside;	/* int3 executed inside a window */
	uint64_t	kc_other;	/* anything else inside a window */
	uint64_t	kc_stray;	/* int3 executed outside every window */
	uint64_t	kc_jin;		/* jmp rel32 executed inside a window */
	uint64_t	kc_jout;	/* jmp rel32 executed outside them */
};

static struct ko_site	*ko_sites;	/* by address */
static struct ko_site	*ko_rel;	/* by offset from the anchor */
static struct ko_count	*ko_counts;	/* by input index */
static size_t		ko_nsites, ko_nrel;
static uint64_t		ko_base;	/* the anchor's address, 0: not seen */
static uint64_t		ko_anchors;	/* anchors translated at a new place */
static int		ko_window;	/* 1 between the arm and disarm markers */
static uint64_t		ko_windows;	/* arm markers seen */
static uint64_t		ko_unpaired;	/* markers out of turn */
static uint32_t		ko_mark_arm, ko_mark_disarm, ko_mark_anchor;
static char		*ko_out;
static int64_t		*ko_last;	/* per vCPU: input index, -1: none */
static int		ko_nvcpus;

static int
ko_cmp(const void *a, const void *b)
{
	const struct ko_site *x = a, *y = b;

	return (x->ks_addr < y->ks_addr ? -1 : x->ks_addr > y->ks_addr);
}

static long
ko_find(const struct ko_site *sites, size_t n, uint64_t addr)
{
	size_t lo, hi, mid;

	lo = 0;
	hi = n;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (sites[mid].ks_addr == addr)
			return ((long)mid);
		if (sites[mid].ks_addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (-1);
}

/* The input index of the probe at 'addr', or -1. */
static long
ko_index(uint64_t addr)
{
	uint64_t base;
	long at;

	if ((at = ko_find(ko_sites, ko_nsites, addr)) >= 0)
		return ((long)ko_sites[at].ks_index);
	base = __atomic_load_n(&ko_base, __ATOMIC_ACQUIRE);
	if (base == 0 || addr < base ||
	    (at = ko_find(ko_rel, ko_nrel, addr - base)) < 0)
		return (-1);
	return ((long)ko_rel[at].ks_index);
}

/* What the instruction at a probe starts with (userdata's low bits). */
#define	KO_B_OTHER	0
#define	KO_B_INT3	1
#define	KO_B_JMP32	2
#define	KO_B_BITS	2

/* userdata: the input index << KO_B_BITS | KO_B_*. */
static void
ko_exec_probe(unsigned int vcpu, void *userdata)
{
	uintptr_t u = (uintptr_t)userdata;
	struct ko_count *c = &ko_counts[u >> KO_B_BITS];
	uint64_t *n;
	int b = (int)(u & ((1 << KO_B_BITS) - 1));

	if (b == KO_B_INT3 && vcpu < (unsigned int)ko_nvcpus)
		__atomic_store_n(&ko_last[vcpu], (int64_t)(u >> KO_B_BITS),
		    __ATOMIC_RELAXED);
	if (__atomic_load_n(&ko_window, __ATOMIC_ACQUIRE))
		n = b == KO_B_INT3 ? &c->kc_inside : b == KO_B_JMP32 ?
		    &c->kc_jin : &c->kc_other;
	else
		n = b == KO_B_INT3 ? &c->kc_stray : b == KO_B_JMP32 ?
		    &c->kc_jout : NULL;
	if (n != NULL)
		__atomic_fetch_add(n, 1, __ATOMIC_RELAXED);
}

static void
ko_exec_mark(unsigned int vcpu KO_UNUSED, void *userdata)
{
	int arm = userdata != NULL;

	if (__atomic_exchange_n(&ko_window, arm, __ATOMIC_ACQ_REL) == arm)
		__atomic_fetch_add(&ko_unpaired, 1, __ATOMIC_RELAXED);
	if (arm)
		__atomic_fetch_add(&ko_windows, 1, __ATOMIC_RELAXED);
}

/* "nopl DISP(%rax)": 0f 1f 80 and a little-endian disp32. */
static int
ko_marker(const uint8_t *p, size_t len, uint32_t *disp)
{

	if (len != 7 || p[0] != 0x0f || p[1] != 0x1f || p[2] != 0x80)
		return (0);
	*disp = (uint32_t)p[3] | (uint32_t)p[4] << 8 | (uint32_t)p[5] << 16 |
	    (uint32_t)p[6] << 24;
	return (1);
}

static void
ko_translate(qemu_plugin_id_t id KO_UNUSED, struct qemu_plugin_tb *tb)
{
	struct qemu_plugin_insn *insn;
	const uint8_t *p;
	uint64_t addr;
	uint32_t disp;
	size_t i, n, len;
	long at;

	n = qemu_plugin_tb_n_insns(tb);
	for (i = 0; i < n; i++) {
		insn = qemu_plugin_tb_get_insn(tb, i);
		addr = qemu_plugin_insn_vaddr(insn);
		if (addr < KO_KERNEL)
			continue;
		p = qemu_plugin_insn_data(insn);
		len = qemu_plugin_insn_size(insn);
		if (ko_marker(p, len, &disp) && disp == ko_mark_anchor) {
			if (__atomic_exchange_n(&ko_base, addr,
			    __ATOMIC_ACQ_REL) != addr)
				__atomic_fetch_add(&ko_anchors, 1,
				    __ATOMIC_RELAXED);
			continue;
		}
		if (ko_marker(p, len, &disp) &&
		    (disp == ko_mark_arm || disp == ko_mark_disarm)) {
			qemu_plugin_register_vcpu_insn_exec_cb(insn,
			    ko_exec_mark, QEMU_PLUGIN_CB_NO_REGS,
			    disp == ko_mark_arm ? (void *)1 : NULL);
			continue;
		}
		if ((at = ko_index(addr)) < 0)
			continue;
		qemu_plugin_register_vcpu_insn_exec_cb(insn, ko_exec_probe,
		    QEMU_PLUGIN_CB_NO_REGS,
		    (void *)((uintptr_t)at << KO_B_BITS |
		    (len >= 1 && p[0] == KO_INT3 ? KO_B_INT3 :
		    len >= 1 && p[0] == KO_JMP32 ? KO_B_JMP32 : KO_B_OTHER)));
	}
}

static void
ko_exit(qemu_plugin_id_t id KO_UNUSED, void *userdata KO_UNUSED)
{
	FILE *f;
	char *tmp;
	size_t i;

	if (asprintf(&tmp, "%s.tmp", ko_out) < 0)
		return;
	if ((f = fopen(tmp, "w")) == NULL) {
		free(tmp);
		return;
	}
	fprintf(f, "windows %llu\nunpaired %llu\nopen %d\nanchors %llu\n",
	    (unsigned long long)ko_windows, (unsigned long long)ko_unpaired,
	    ko_window, (unsigned long long)ko_anchors);
	for (i = 0; i < (size_t)ko_nvcpus; i++)
		if (ko_last[i] >= 0)
			fprintf(f, "last %zu %lld\n", i, (long long)ko_last[i]);
	for (i = 0; i < ko_nsites + ko_nrel; i++)
		fprintf(f, "%zu %llu %llu %llu %llu %llu\n", i,
		    (unsigned long long)ko_counts[i].kc_inside,
		    (unsigned long long)ko_counts[i].kc_other,
		    (unsigned long long)ko_counts[i].kc_stray,
		    (unsigned long long)ko_counts[i].kc_jin,
		    (unsigned long long)ko_counts[i].kc_jout);
	if (fclose(f) == 0)
		rename(tmp, ko_out);
	free(tmp);
}

/* Append a site to '*sites' ('*n' of them, room for '*cap'). */
static int
ko_add(struct ko_site **sites, size_t *n, size_t *cap, uint64_t addr,
    uint32_t index)
{
	struct ko_site *grown;

	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 1024;
		if ((grown = realloc(*sites, *cap * sizeof(**sites))) == NULL)
			return (-1);
		*sites = grown;
	}
	(*sites)[*n].ks_addr = addr;
	(*sites)[*n].ks_index = index;
	(*n)++;
	return (0);
}

static int
ko_load(const char *path)
{
	FILE *f;
	char line[64];
	unsigned long long a;
	size_t cap, rcap;
	uint32_t index;
	int error;

	if ((f = fopen(path, "r")) == NULL)
		return (-1);
	cap = rcap = 0;
	error = 0;
	for (index = 0; error == 0 && fgets(line, sizeof(line), f) != NULL;
	    index++) {
		if (line[0] == '+' && sscanf(line + 1, "%llx", &a) == 1)
			error = ko_add(&ko_rel, &ko_nrel, &rcap, a, index);
		else if (sscanf(line, "%llx", &a) == 1)
			error = ko_add(&ko_sites, &ko_nsites, &cap, a, index);
		else
			error = -1;
	}
	fclose(f);
	if (error != 0)
		return (-1);
	ko_counts = calloc(ko_nsites + ko_nrel + 1, sizeof(*ko_counts));
	if (ko_counts == NULL)
		return (-1);
	qsort(ko_sites, ko_nsites, sizeof(*ko_sites), ko_cmp);
	qsort(ko_rel, ko_nrel, sizeof(*ko_rel), ko_cmp);
	return (0);
}

QEMU_PLUGIN_EXPORT int
qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
    char **argv)
{
	const char *probes = NULL;
	int i, have_arm = 0, have_disarm = 0, have_anchor = 0;

	for (i = 0; i < argc; i++) {
		if (strncmp(argv[i], "probes=", 7) == 0)
			probes = argv[i] + 7;
		else if (strncmp(argv[i], "out=", 4) == 0)
			ko_out = strdup(argv[i] + 4);
		else if (strncmp(argv[i], "arm=", 4) == 0) {
			ko_mark_arm = (uint32_t)strtoul(argv[i] + 4, NULL, 10);
			have_arm = 1;
		} else if (strncmp(argv[i], "disarm=", 7) == 0) {
			ko_mark_disarm = (uint32_t)strtoul(argv[i] + 7, NULL,
			    10);
			have_disarm = 1;
		} else if (strncmp(argv[i], "anchor=", 7) == 0) {
			ko_mark_anchor = (uint32_t)strtoul(argv[i] + 7, NULL,
			    10);
			have_anchor = 1;
		} else {
			fprintf(stderr, "kinst_oracle: unknown argument %s\n",
			    argv[i]);
			return (-1);
		}
	}
	if (probes == NULL || ko_out == NULL || !have_arm || !have_disarm ||
	    !have_anchor) {
		fprintf(stderr, "kinst_oracle: needs probes=, out=, arm=, "
		    "disarm=, anchor=\n");
		return (-1);
	}
	ko_nvcpus = info->system_emulation ? info->system.max_vcpus : 1;
	if ((ko_last = malloc(sizeof(*ko_last) * (size_t)ko_nvcpus)) == NULL)
		return (-1);
	for (i = 0; i < ko_nvcpus; i++)
		ko_last[i] = -1;
	if (ko_load(probes) != 0) {
		fprintf(stderr, "kinst_oracle: cannot read %s\n", probes);
		return (-1);
	}
	qemu_plugin_register_vcpu_tb_trans_cb(id, ko_translate);
	qemu_plugin_register_atexit_cb(id, ko_exit, NULL);
	return (0);
}
