/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst.c: the machine-independent FreeBSD side of kinstkit's kinst
 * provider.
 *
 * This file registers the DTrace provider "kinst" and /dev/dtrace/kinst
 * exactly as sys/cddl/dev/kinst/kinst.c does, so that stock dtrace(1) and
 * libdtrace work unchanged, but it never decodes an instruction: every probe
 * comes from the generated table in kinst_table.c, made ahead of time for one
 * linker file (kinst_file, in the generated kinst_target.c), and the portable
 * core (kinst_funcs.c, <arch>/kinst_core.c) reads the table, checks a
 * function's bytes against it and derives each probe's metadata from the
 * live instruction.  The breakpoint handler, the patching of the breakpoint
 * and the trampolines are in <arch>/kinst_isa.c (amd64, arm64, riscv),
 * behind the interface kinst.h declares; nothing here knows the ISA but
 * through it.  Design notes and the differences from stock kinst:
 * docs/kinst-module.md.
 *
 * Probe lifecycle.  A probe is kinst:<module>:<function>:<offset>, <module>
 * being the linker file's name ("kernel", or "foo.ko") as in stock kinst.
 * Probes are made on demand, as in stock kinst: only for a function named
 * exactly, by the KINSTIOC_MAKEPROBE ioctl libdtrace issues for "kinst::f:"
 * and "kinst::f:off", or by a probe description naming the provider
 * "kinst" exactly that the provide callback is given.  provide(NULL) --
 * dtrace_open() asks every provider for every probe, on every dtrace(1) run
 * -- an empty or glob provider and an empty or glob function name make
 * nothing: a whole kernel's table is millions of probes.  Every copy of a
 * name (local functions of different files) gets its probes under the
 * shared name; DTrace gives each its own id.  A function's probes are made
 * only if its live bytes have the table's digest (our own breakpoints put
 * back first), and each probe's struct kinst_md is derived from those
 * verified bytes.  A probe is made once per patch address: an address that
 * already has a probe DTrace has not destroyed gets none.
 *
 * Enabling takes the probe's trampoline (reserved or filled when it was
 * made) and writes the ISA's breakpoint (amd64 int3 over the first byte,
 * arm64 brk over the word, riscv c.ebreak over the first halfword)
 * if what is there is still the original; disabling puts the original back
 * if what is there is still our breakpoint.
 * Destroying unlinks the probe from kinst_probetab; it is freed after the
 * next dtrace_sync() (kinst_reap()), since the breakpoint handler may still
 * be walking a chain through it.
 *
 * Locking, and which callbacks run under which locks:
 *
 * - dtps_provide runs with dtrace_provider_lock held (dtrace_open(),
 *   DTRACEIOC_PROBEMATCH, enablings), dtrace_lock not held;
 *   dtps_provide_module with dtrace_provider_lock held, called from the kld
 *   load event with kld_sx held.
 * - dtps_enable and dtps_disable run with dtrace_lock (and cpu_lock) held,
 *   dtps_destroy with dtrace_provider_lock and dtrace_lock held.  None of
 *   them sleeps or allocates: dtps_enable has no way to fail, so everything
 *   that can fail for want of memory is done when the probe is made.
 * - kinst_sx serialises probe creation, function resolution, kinst_reap()
 *   and the trampoline reservations.  It is taken after kld_sx (ioctl for a
 *   .ko table, kld events) and after dtrace_provider_lock (provide), and
 *   before dtrace_lock (dtrace_probe_create()).  The provide callbacks never
 *   enter kld_sx (the kld unload path takes kld_sx, then
 *   dtrace_provider_lock).
 * - kinst_hash_mtx, a leaf mutex, serialises the writers of kinst_probetab
 *   (creation inserts, destroy unlinks), the graveyard, and kp_gone and
 *   kinst_going with the nenabled count.  kinst_tramp_mtx
 *   (amd64/kinst_isa.c) is taken inside it.
 * - kinst_dev_sx keeps the device's users (the kernel-table ioctl and close,
 *   both outside kld_sx) and the kld_unload handler's dtrace_condense() away
 *   from the unload handler's dtrace_unregister(); dtrace_condense() is
 *   never called with kinst_sx held.
 * - The breakpoint handler takes no lock: probes are published with release
 *   stores and unlinked, never freed, while it may see them.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/conf.h>
#include <sys/eventhandler.h>
#include <sys/ioccom.h>
#include <sys/kernel.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/module.h>
#include <sys/mutex.h>
#include <sys/proc.h>
#include <sys/sx.h>
#include <sys/sysctl.h>

#include <sys/dtrace.h>

#include <machine/atomic.h>

#include "kinst_core.h"
#include "kinst_target.h"
#include "kinst.h"

/*
 * Artificial frames above the probe site, 3 as in stock kinst's
 * machine-independent kinst.c, for every ISA: the trap handler's
 * dtrace_invop_start() (or its caller), dtrace_invop() and kinst_invop().
 */
#define	KINST_AFRAMES		3

/* kinst_fstate[], one byte per table function */
#define	KINST_FS_FOUND		0x01	/* at its table address + bias */
#define	KINST_FS_WARNED		0x02	/* why it has no probes was printed */

/* kp_warned */
#define	KINST_W_ENABLE		0x01
#define	KINST_W_DISABLE		0x02

MALLOC_DEFINE(M_KINST, "kinst", "kinstkit kinst provider");

static d_open_t		kinst_open;
static d_close_t	kinst_close;
static d_ioctl_t	kinst_ioctl;

static void	kinst_provide(void *, dtrace_probedesc_t *);
static void	kinst_provide_module(void *, modctl_t *);
static void	kinst_enable(void *, dtrace_id_t, void *);
static void	kinst_disable(void *, dtrace_id_t, void *);
static void	kinst_getargdesc(void *, dtrace_id_t, void *,
		    dtrace_argdesc_t *);
static void	kinst_destroy(void *, dtrace_id_t, void *);
static void	kinst_going_check_locked(void);

static dtrace_pattr_t kinst_attr = {
{ DTRACE_STABILITY_EVOLVING, DTRACE_STABILITY_EVOLVING, DTRACE_CLASS_COMMON },
{ DTRACE_STABILITY_PRIVATE, DTRACE_STABILITY_PRIVATE, DTRACE_CLASS_UNKNOWN },
{ DTRACE_STABILITY_PRIVATE, DTRACE_STABILITY_PRIVATE, DTRACE_CLASS_ISA },
{ DTRACE_STABILITY_EVOLVING, DTRACE_STABILITY_EVOLVING, DTRACE_CLASS_COMMON },
{ DTRACE_STABILITY_PRIVATE, DTRACE_STABILITY_PRIVATE, DTRACE_CLASS_ISA },
};

static const dtrace_pops_t kinst_pops = {
	.dtps_provide =		kinst_provide,
	.dtps_provide_module =	kinst_provide_module,
	.dtps_enable =		kinst_enable,
	.dtps_disable =		kinst_disable,
	.dtps_suspend =		NULL,
	.dtps_resume =		NULL,
	.dtps_getargdesc =	kinst_getargdesc,
	.dtps_getargval =	NULL,
	.dtps_usermode =	NULL,
	.dtps_destroy =		kinst_destroy,
};

static struct cdevsw kinst_cdevsw = {
	.d_version =	D_VERSION,
	.d_flags =	D_TRACKCLOSE,
	.d_open =	kinst_open,
	.d_close =	kinst_close,
	.d_ioctl =	kinst_ioctl,
	.d_name =	"kinst",
};

struct sx		kinst_sx;
static struct sx	kinst_dev_sx;
static struct mtx	kinst_hash_mtx;
SX_SYSINIT(kinst_sx, &kinst_sx, "kinst");
SX_SYSINIT(kinst_dev_sx, &kinst_dev_sx, "kinst device");
MTX_SYSINIT(kinst_hash_mtx, &kinst_hash_mtx, "kinst probes", MTX_DEF);

static dtrace_provider_id_t	kinst_id;
static bool			kinst_registered;
static bool			kinst_invop_added;
static int			kinst_load_error;
static struct cdev		*kinst_cdev;
static eventhandler_tag		kinst_unload_try_tag;
static eventhandler_tag		kinst_unload_tag;

/*
 * The probes by patch address (KINST_PROBETAB_SIZE chains), and those
 * DTrace has destroyed, chained through kp_gravenext until kinst_reap()
 * frees them.
 */
static struct kinst_probe	**kinst_probetab;
static struct kinst_probe	*kinst_grave;

static uint8_t			*kinst_fstate;	/* KINST_FS_*, per function */
static linker_file_t		kinst_lf;	/* resolved against; or NULL */
static linker_file_t		kinst_going;	/* its unload under way */
static int			kinst_lf_loadcnt;
static uint64_t			kinst_bias;	/* live minus table address */

/*
 * kinst_excluded() as in sys/cddl/dev/kinst/kinst.c, over the generated
 * lists (kinst_target.c): the reason, or NULL when the function may be
 * traced.
 */
static const char *
kinst_excluded(const char *name)
{
	const struct kinst_exclusion *kx;
	const char *const *ex;

	for (kx = kinst_excluded_names; kx->kx_name != NULL; kx++) {
		if (strcmp(name, kx->kx_name) == 0)
			return (kx->kx_why);
	}
	for (ex = kinst_excluded_exceptions; *ex != NULL; ex++) {
		if (strncmp(name, *ex, strlen(*ex)) == 0)
			return (NULL);
	}
	for (kx = kinst_excluded_prefixes; kx->kx_name != NULL; kx++) {
		if (strncmp(name, kx->kx_name, strlen(kx->kx_name)) == 0)
			return (kx->kx_why);
	}
	return (NULL);
}

/* A DTrace glob, as dtrace_probekey_func() tells one. */
static bool
kinst_isglob(const char *s)
{

	for (; *s != '\0'; s++) {
		if (*s == '*' || *s == '?' || *s == '[' || *s == '\\')
			return (true);
	}
	return (false);
}

/*
 * Could a probe description's or the ioctl's module field name this table's
 * file?  The probes' module is lf->filename ("kernel", "foo.ko"); "foo" is
 * accepted for "foo.ko" too, as kldstat(8) and dtrace_module_unloaded() name
 * a module without the suffix.
 */
static bool
kinst_mod_matches(const char *mod)
{
	size_t len;

	if (mod[0] == '\0' || kinst_isglob(mod) ||
	    strcmp(mod, kinst_modname) == 0 || strcmp(mod, kinst_file) == 0)
		return (true);
	len = strlen(mod);
	return (!kinst_table_kernel && strncmp(mod, kinst_file, len) == 0 &&
	    strcmp(kinst_file + len, ".ko") == 0);
}

static const char *
kinst_fname(u_int f)
{
	struct kinst_func kf;

	kinst_func_get(&kinst_table, f, &kf);
	return (kf.kf_name);
}

/* The first position in name order whose name is not below 'name'. */
static u_int
kinst_byname_first(const char *name)
{
	u_int lo, hi, mid;

	lo = 0;
	hi = kinst_table.kt_nfuncs;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (strcmp(kinst_fname(kinst_func_byname(&kinst_table, mid)),
		    name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo);
}

/* Say once why function 'f' makes no probes: 'why', then 'where' (or ""). */
static void
kinst_fwarn(u_int f, const struct kinst_func *kf, const char *why,
    const char *where)
{

	if ((kinst_fstate[f] & KINST_FS_WARNED) != 0)
		return;
	kinst_fstate[f] |= KINST_FS_WARNED;
	printf("kinst: no probes in %s: %s%s\n", kf->kf_name, why, where);
}

/*
 * The probe at live address 'addr' that the breakpoint handler may claim:
 * the newest one there that has been armed.  Probe context: no lock.
 * Chains change by publication with release order (kinst_hash_insert()) and
 * by unlinking, and an unlinked probe keeps its kp_hashnext and is freed
 * only after a dtrace_sync() (kinst_reap()), so a walk that is on it when it
 * goes finishes safely.
 */
struct kinst_probe *
kinst_probe_at(uintptr_t addr)
{
	struct kinst_probe *kp;

	kp = (struct kinst_probe *)atomic_load_acq_ptr(
	    (volatile uintptr_t *)&kinst_probetab[KINST_ADDR2NDX(addr)]);
	for (; kp != NULL; kp = (struct kinst_probe *)atomic_load_acq_ptr(
	    (volatile uintptr_t *)&kp->kp_hashnext)) {
		if ((uintptr_t)kp->kp_patchpoint == addr &&
		    atomic_load_acq_int(&kp->kp_state) != KINST_S_IDLE)
			return (kp);
	}
	return (NULL);
}

/*
 * The probe DTrace still has at live address 'addr' (not destroyed, its file
 * not gone), or NULL.  kinst_sx held, so nothing is freed meanwhile; the
 * chain is walked under kinst_hash_mtx, since DTrace destroys probes (and
 * kinst_destroy() unlinks them) without kinst_sx.
 */
static struct kinst_probe *
kinst_probe_live(uintptr_t addr)
{
	struct kinst_probe *kp;

	sx_assert(&kinst_sx, SA_XLOCKED);
	mtx_lock(&kinst_hash_mtx);
	for (kp = kinst_probetab[KINST_ADDR2NDX(addr)]; kp != NULL;
	    kp = kp->kp_hashnext) {
		if ((uintptr_t)kp->kp_patchpoint == addr && !kp->kp_gone)
			break;
	}
	mtx_unlock(&kinst_hash_mtx);
	return (kp);
}

/* Publish 'kp', fully set up, to the breakpoint handler. */
static void
kinst_hash_insert(struct kinst_probe *kp)
{
	struct kinst_probe **head;

	mtx_lock(&kinst_hash_mtx);
	head = &kinst_probetab[KINST_ADDR2NDX(kp->kp_patchpoint)];
	kp->kp_hashnext = *head;
	atomic_store_rel_ptr((volatile uintptr_t *)head, (uintptr_t)kp);
	mtx_unlock(&kinst_hash_mtx);
}

/*
 * Free the probes DTrace has destroyed.  They were unlinked from
 * kinst_probetab, but a CPU in kinst_invop() may still be walking a chain
 * through one: dtrace_sync() waits for every CPU to leave probe context
 * (interrupts are disabled there).  kinst_sx held, so that kinst_probe_live()
 * never meets a freed probe; may sleep.
 */
static void
kinst_reap(void)
{
	struct kinst_probe *kp, *next;

	sx_assert(&kinst_sx, SA_XLOCKED);
	mtx_lock(&kinst_hash_mtx);
	kp = kinst_grave;
	kinst_grave = NULL;
	mtx_unlock(&kinst_hash_mtx);
	if (kp == NULL)
		return;
	dtrace_sync();
	for (; kp != NULL; kp = next) {
		next = kp->kp_gravenext;
		free(kp, M_KINST);
	}
}

/*
 * Destroy the probes no enabling holds (dtrace_condense()), and free them.
 * Not under kinst_sx, which DTrace's locks come before.
 */
static void
kinst_condense(void)
{

	sx_slock(&kinst_dev_sx);
	if (kinst_registered)
		(void)dtrace_condense(kinst_id);
	sx_sunlock(&kinst_dev_sx);
	sx_xlock(&kinst_sx);
	kinst_reap();
	sx_xunlock(&kinst_sx);
}

/*
 * Resolving the table against a linker file: the anchor's live address gives
 * the bias, and a table function is found when a function symbol of the same
 * name and size sits exactly at its table address plus the bias.  The kernel
 * linker's function lists include local symbols (link_elf.c walks the full
 * symbol table), which linker_file_lookup_symbol() no longer resolves.
 */
struct kinst_resolve {
	uint64_t	kr_bias;
	bool		kr_found;
};

static int
kinst_anchor_cb(linker_file_t lf __unused, int symidx __unused,
    linker_symval_t *sv, void *arg)
{
	struct kinst_resolve *kr;
	struct kinst_func kf;

	kr = arg;
	kinst_func_get(&kinst_table, (uint32_t)kinst_anchor, &kf);
	if (sv->size != kf.kf_size || strcmp(sv->name, kf.kf_name) != 0)
		return (0);
	kr->kr_bias = (uint64_t)(uintptr_t)sv->value - kf.kf_addr;
	kr->kr_found = true;
	return (1);
}

static int
kinst_match_cb(linker_file_t lf __unused, int symidx __unused,
    linker_symval_t *sv, void *arg)
{
	struct kinst_resolve *kr;
	struct kinst_func kf;
	u_int i, f;

	kr = arg;
	for (i = kinst_byname_first(sv->name); i < kinst_table.kt_nfuncs;
	    i++) {
		f = kinst_func_byname(&kinst_table, i);
		kinst_func_get(&kinst_table, f, &kf);
		if (strcmp(kf.kf_name, sv->name) != 0)
			break;
		if (kf.kf_size == sv->size &&
		    kf.kf_addr + kr->kr_bias == (uint64_t)(uintptr_t)sv->value)
			kinst_fstate[f] |= KINST_FS_FOUND;
	}
	return (0);
}

static void
kinst_resolve_locked(linker_file_t lf)
{
	struct kinst_resolve kr;
	struct kinst_func kf;
	u_int f;

	sx_assert(&kinst_sx, SA_XLOCKED);
	if (lf == kinst_lf && lf->loadcnt == kinst_lf_loadcnt)
		return;
	kinst_lf = NULL;
	for (f = 0; f < kinst_table.kt_nfuncs; f++)
		kinst_fstate[f] = 0;
	if (kinst_anchor < 0)
		return;
	kinst_func_get(&kinst_table, (uint32_t)kinst_anchor, &kf);
	kr.kr_bias = 0;
	kr.kr_found = false;
	(void)linker_file_function_listall(lf, kinst_anchor_cb, &kr);
	if (!kr.kr_found) {
		printf("kinst: %s has no %u-byte function %s: the table was "
		    "made from another image\n", lf->filename, kf.kf_size,
		    kf.kf_name);
		return;
	}
	(void)linker_file_function_listall(lf, kinst_match_cb, &kr);
	kinst_bias = kr.kr_bias;
	kinst_lf = lf;
	kinst_lf_loadcnt = lf->loadcnt;
}

/*
 * Make the probes of table function 'f' (one copy of its name) at offset
 * 'off', every instruction when -1.  Its live bytes must have the table's
 * digest, with the original put back under each breakpoint of ours; each
 * probe's kinst_md and kp_savedval are taken from those verified bytes,
 * never from the live ones again (another CPU may arm a probe meanwhile).
 * 0, EINVAL for an explicit offset the table refuses or cannot describe,
 * ENOMEM.
 */
static int
kinst_make_func(u_int f, const struct kinst_func *kf, int off)
{
	struct kinst_walk kw;
	struct kinst_insn ki;
	struct kinst_probe *kp;
	struct kinst_md md;
	uint8_t *base, *live, *copy;
	const char *why;
	char name[16];
	int error, rv;

	sx_assert(&kinst_sx, SA_XLOCKED);
	if ((why = kinst_excluded(kf->kf_name)) != NULL) {
		/* Stock kinst answers an excluded function with 0 as well. */
		kinst_fwarn(f, kf, why, "");
		return (0);
	}
	if ((kinst_fstate[f] & KINST_FS_FOUND) == 0) {
		kinst_fwarn(f, kf, "not at its table address in ", kinst_file);
		return (0);
	}
	if (off != -1 && (off < 0 || (uint32_t)off >= kf->kf_size))
		return (0);
	base = (uint8_t *)(uintptr_t)(kf->kf_addr + kinst_bias);
	live = malloc(2 * (size_t)MAX(kf->kf_size, 1), M_KINST, M_WAITOK);
	copy = live + kf->kf_size;
	kinst_bytecopy(live, base, kf->kf_size);
	kinst_core_walk(&kinst_table, kf, &kw);
	while (kinst_core_next(&kw, &ki) > 0) {
		if (ki.ki_kind == KINST_R_REFUSED)
			continue;
		kp = kinst_probe_live((uintptr_t)(base + ki.ki_off));
		if (kp != NULL &&
		    atomic_load_acq_int(&kp->kp_state) != KINST_S_IDLE)
			kinst_isa_unpatch(kp, live + ki.ki_off);
	}
	kinst_bytecopy(copy, live, kf->kf_size);
	if ((rv = kinst_core_digest_ok(&kinst_table, kf, copy)) != 0) {
		kinst_fwarn(f, kf, rv == KINST_E_BYTES ? "its bytes differ "
		    "from the table's (another build of it, or code patched "
		    "since)" : "its table records are malformed", "");
		free(live, M_KINST);
		return (0);
	}

	error = 0;
	kinst_core_walk(&kinst_table, kf, &kw);
	while ((rv = kinst_core_next(&kw, &ki)) > 0) {
		if (off != -1 && ki.ki_off != (uint32_t)off)
			continue;
		if (ki.ki_kind == KINST_R_REFUSED) {
			/* As stock kinst answers an explicit popf or sti. */
			if (off != -1) {
				printf("kinst: %s:%d is not a probe of the "
				    "generated table (kinst_refused.txt says "
				    "why)\n", kf->kf_name, off);
				error = EINVAL;
			}
			continue;
		}
		if (kinst_probe_live((uintptr_t)(base + ki.ki_off)) != NULL)
			continue;
		if (ki.ki_off + ki.ki_len > kf->kf_size ||
		    kinst_core_derive(&ki, live + ki.ki_off, &md) != 0) {
			printf("kinst: no probe %s:%u: its table record "
			    "contradicts the instruction\n", kf->kf_name,
			    ki.ki_off);
			if (off != -1)
				error = EINVAL;
			continue;
		}
		kp = malloc(sizeof(*kp), M_KINST, M_WAITOK | M_ZERO);
		kp->kp_patchpoint = base + ki.ki_off;
		kp->kp_lf = kinst_lf;
		kp->kp_func = kf->kf_name;
		kp->kp_off = ki.ki_off;
		kp->kp_index = ki.ki_probe;
		kp->kp_fidx = f;
		kp->kp_md = md;
		kp->kp_savedval = kinst_isa_peek(kp, live + ki.ki_off);
		kp->kp_state = KINST_S_IDLE;
		if ((rv = kinst_tramp_prepare(kp)) != 0) {
			printf("kinst: no probe %s:%u: no memory for its "
			    "trampoline\n", kf->kf_name, ki.ki_off);
			free(kp, M_KINST);
			error = rv;
			break;
		}
		kinst_hash_insert(kp);
		snprintf(name, sizeof(name), "%u", ki.ki_off);
		kp->kp_id = dtrace_probe_create(kinst_id, kinst_modname,
		    kf->kf_name, name, KINST_AFRAMES, kp);
	}
	if (rv < 0)
		kinst_fwarn(f, kf, "its table records are malformed", "");
	free(live, M_KINST);
	return (error);
}

/*
 * Make the probes of every table function named 'func' at offset 'off'
 * (every instruction when -1), in the resolved file.
 */
static int
kinst_make_locked(const char *func, int off)
{
	struct kinst_func kf;
	u_int i, f;
	int error, rv;

	sx_assert(&kinst_sx, SA_XLOCKED);
	kinst_reap();
	if (kinst_lf == NULL)
		return (0);
	error = 0;
	for (i = kinst_byname_first(func); i < kinst_table.kt_nfuncs; i++) {
		f = kinst_func_byname(&kinst_table, i);
		kinst_func_get(&kinst_table, f, &kf);
		if (strcmp(kf.kf_name, func) != 0)
			break;
		if ((rv = kinst_make_func(f, &kf, off)) != 0 && error == 0)
			error = rv;
		if (rv == ENOMEM)
			break;
	}
	return (error);
}

/*
 * dtps_provide.  Stock kinst has none: its probes come from the ioctl only.
 * Here a description that names the provider exactly ("kinst", as libdtrace
 * passes kinst::f: and kinst::f:off) also makes the probes of a function it
 * names exactly.  Everything else makes nothing: a NULL description
 * (dtrace_open(), on every dtrace(1) run), an empty or glob provider
 * (dtrace -n ::vm_fault: or dtrace -l -f vm_fault would otherwise make, and
 * enable, a probe on every instruction, where stock gives fbt's two), and an
 * empty or glob function; kinst::: and kinst::vm_*: are told why, once per
 * call.  A .ko table needs the file resolved by an earlier load, ioctl or
 * kld event: linker_file_foreach() would take kld_sx under
 * dtrace_provider_lock, the reverse of the kld unload path's order.
 */
static void
kinst_provide(void *arg __unused, dtrace_probedesc_t *desc)
{

	if (desc == NULL || strcmp(desc->dtpd_provider, "kinst") != 0)
		return;
	if (!kinst_mod_matches(desc->dtpd_mod))
		return;
	if (desc->dtpd_func[0] == '\0' || kinst_isglob(desc->dtpd_func)) {
		printf("kinst: probes are made per named function "
		    "(kinst::FUNC: or kinst::FUNC:OFFSET), none for an empty "
		    "or glob function; `invoke probes` (python -m generator "
		    "probes) lists a function's probe sites\n");
		return;
	}
	sx_xlock(&kinst_sx);
	(void)kinst_make_locked(desc->dtpd_func, -1);
	sx_xunlock(&kinst_sx);
}

/*
 * dtps_provide_module: a file was loaded.  If it is the table's .ko, find
 * the table's functions in it; probes are still made only on demand.
 */
static void
kinst_provide_module(void *arg __unused, modctl_t *lf)
{

	if (kinst_table_kernel || strcmp(lf->filename, kinst_file) != 0)
		return;
	sx_xlock(&kinst_sx);
	kinst_going_check_locked();
	kinst_resolve_locked(lf);
	sx_xunlock(&kinst_sx);
}

/*
 * A .ko table's file going away.  DTrace never destroys this file's probes:
 * dtrace_module_unloaded() matches probes by the file name without ".ko",
 * and they are named "foo.ko" as in stock kinst.  So the unload is followed
 * in two steps, because sys/kern/kern_linker.c's linker_file_unload() can
 * still refuse it after the kld_unload_try handlers have run (a module's
 * MOD_QUIESCE or MOD_UNLOAD says no), and frees the file's text before the
 * kld_unload event:
 *
 * - kld_unload_try (kld_sx held; EVENTHANDLER_PRI_FIRST, so before DTrace's
 *   own handler, which refuses while nenabled is not 0): if no probe of the
 *   file is enabled (nenabled, read under the lock the enable callback
 *   counts under), the file is "going" (kinst_going): its probes are not
 *   enabled, no new ones are made in it, but nothing is lost yet;
 * - kld_unload, after the text is freed: the file's probes are gone for
 *   good (never enabled, not counted as their address's probe) and
 *   destroyed with dtrace_condense(), all but those an enabling still
 *   holds, which go when it does;
 * - a refused unload leaves the file LINKER_FILE_LINKED (the flag is taken
 *   off only once every module agreed), and the next kld_sx holder that
 *   looks (the ioctl, a kld event) finds it so and lets its probes be used
 *   again.
 */
static void
kinst_going_check_locked(void)
{

	sx_assert(&kinst_sx, SA_XLOCKED);
	if (kinst_going == NULL ||
	    (kinst_going->flags & LINKER_FILE_LINKED) == 0)
		return;
	mtx_lock(&kinst_hash_mtx);
	kinst_going = NULL;
	mtx_unlock(&kinst_hash_mtx);
}

static void
kinst_kld_unload_try(void *arg __unused, linker_file_t lf, int *error)
{

	if (*error != 0)
		return;
	sx_xlock(&kinst_sx);
	kinst_going_check_locked();
	if (lf == kinst_lf && lf != linker_kernel_file) {
		mtx_lock(&kinst_hash_mtx);
		if (lf->nenabled == 0) {
			kinst_going = lf;
			kinst_lf = NULL;
		}
		mtx_unlock(&kinst_hash_mtx);
	}
	sx_xunlock(&kinst_sx);
}

static void
kinst_kld_unload(void *arg __unused, const char *filename __unused,
    caddr_t address, size_t size __unused)
{
	struct kinst_probe *kp;
	u_int i;

	sx_xlock(&kinst_sx);
	if (kinst_going == NULL || kinst_going->address != address) {
		kinst_going_check_locked();
		sx_xunlock(&kinst_sx);
		return;
	}
	mtx_lock(&kinst_hash_mtx);
	for (i = 0; i < KINST_PROBETAB_SIZE; i++) {
		for (kp = kinst_probetab[i]; kp != NULL; kp = kp->kp_hashnext) {
			if (kp->kp_lf == kinst_going)
				kp->kp_gone = true;
		}
	}
	kinst_going = NULL;
	mtx_unlock(&kinst_hash_mtx);
	sx_xunlock(&kinst_sx);
	kinst_condense();
}

/*
 * Whether kp's patch point is gone or going is asked first, under the lock
 * the unload handlers mark it under: nothing is read or written at a patch
 * point whose text may be freed.  Once counted in nenabled, the file cannot
 * start going (kinst_kld_unload_try(), and DTrace's handler, see it).
 */
static void
kinst_enable(void *arg __unused, dtrace_id_t id, void *parg)
{
	struct kinst_probe *kp;
	const char *why;
	kinst_patchval_t live;
	bool gone;

	kp = parg;
	kp->kp_id = id;
	if (kp->kp_counted)
		return;
	why = NULL;
	live = 0;
	mtx_lock(&kinst_hash_mtx);
	gone = kp->kp_gone || kp->kp_lf == kinst_going;
	if (gone)
		why = "its linker file is unloaded or being unloaded";
	else if ((live = kinst_isa_peek(kp, kp->kp_patchpoint)) !=
	    kp->kp_savedval)
		why = "the " KINST_SITE_UNIT " there is not the original one "
		    "(another provider's breakpoint?)";
	else if ((why = kinst_tramp_take(kp)) == NULL) {
		kp->kp_counted = true;
		kp->kp_lf->nenabled++;
	}
	mtx_unlock(&kinst_hash_mtx);
	if (why != NULL) {
		if ((kp->kp_warned & KINST_W_ENABLE) != 0)
			return;
		kp->kp_warned |= KINST_W_ENABLE;
		if (gone)
			printf("kinst: not enabling %s:%s:%u: %s\n",
			    kinst_modname, kp->kp_func, kp->kp_off, why);
		else
			printf("kinst: not enabling %s:%s:%u: %s ("
			    KINST_SITE_UNIT " %#x, original %#x)\n",
			    kinst_modname, kp->kp_func, kp->kp_off, why,
			    (u_int)live, (u_int)kp->kp_savedval);
		return;
	}
	/* Ours before its breakpoint fires; written only over the original. */
	atomic_store_rel_int(&kp->kp_state, KINST_S_ARMED);
	if (!kinst_isa_arm(kp))
		atomic_store_rel_int(&kp->kp_state, KINST_S_DISARMED);
}

/*
 * Put the original back, but only over our own breakpoint: if another
 * patcher (fbt at a function's entry, a hot-patched SDT site) has rewritten
 * the site meanwhile, it is theirs now.  The probe is left disarmed: a trap
 * taken just before is still handled (DTrace's dtrace_sync() after the
 * disable waits for it), a later one there is not ours.
 */
static void
kinst_disable(void *arg __unused, dtrace_id_t id __unused, void *parg)
{
	struct kinst_probe *kp;
	kinst_patchval_t live;

	kp = parg;
	if (!kp->kp_counted)
		return;
	if (kp->kp_state == KINST_S_ARMED) {
		if (!kinst_isa_disarm(kp) &&
		    (kp->kp_warned & KINST_W_DISABLE) == 0) {
			kp->kp_warned |= KINST_W_DISABLE;
			live = kinst_isa_peek(kp, kp->kp_patchpoint);
			printf("kinst: disabling %s:%s:%u: the " KINST_SITE_UNIT
			    " there is %#x, not our breakpoint: left as it is "
			    "(another patcher rewrote the site)\n",
			    kinst_modname, kp->kp_func, kp->kp_off,
			    (u_int)live);
		}
		atomic_store_rel_int(&kp->kp_state, KINST_S_DISARMED);
	}
	mtx_lock(&kinst_hash_mtx);
	kp->kp_counted = false;
	kp->kp_lf->nenabled--;
	mtx_unlock(&kinst_hash_mtx);
}

/*
 * dtps_destroy.  DTrace destroys only disabled probes, after the
 * dtrace_sync() that follows their disabling, so no trap for this probe is
 * in flight; but kinst_invop() may be walking the chain through it on the
 * way to another probe, so it is unlinked now and freed by kinst_reap().
 * Its trampoline slot stays with its address (kinst_isa.c).
 */
static void
kinst_destroy(void *arg __unused, dtrace_id_t id __unused, void *parg)
{
	struct kinst_probe *kp, **pp;

	kp = parg;
	KASSERT(!kp->kp_counted, ("kinst: %s:%u destroyed while enabled",
	    kp->kp_func, kp->kp_off));
	kinst_tramp_release(kp);
	mtx_lock(&kinst_hash_mtx);
	for (pp = &kinst_probetab[KINST_ADDR2NDX(kp->kp_patchpoint)];
	    *pp != NULL && *pp != kp; pp = &(*pp)->kp_hashnext)
		;
	KASSERT(*pp == kp, ("kinst: %s:%u not in kinst_probetab",
	    kp->kp_func, kp->kp_off));
	if (*pp == kp)
		atomic_store_rel_ptr((volatile uintptr_t *)pp,
		    (uintptr_t)kp->kp_hashnext);
	kp->kp_gravenext = kinst_grave;
	kinst_grave = kp;
	mtx_unlock(&kinst_hash_mtx);
}

static void
kinst_getargdesc(void *arg __unused, dtrace_id_t id __unused,
    void *parg __unused, dtrace_argdesc_t *desc)
{

	desc->dtargd_ndx = DTRACE_ARGNONE;
}

static int
kinst_open(struct cdev *dev __unused, int oflags __unused,
    int devtype __unused, struct thread *td __unused)
{

	return (0);
}

/* Like stock kinst: the probes a consumer made but did not enable go. */
static int
kinst_close(struct cdev *dev __unused, int fflag __unused,
    int devtype __unused, struct thread *td __unused)
{

	kinst_condense();
	return (0);
}

/* KINSTIOC_MAKEPROBE in the table's file; the .ko case runs under kld_sx. */
static int
kinst_ioctl_file(linker_file_t lf, void *arg)
{
	dtrace_kinst_probedesc_t *pd;
	int error;

	if (!kinst_table_kernel && (strcmp(lf->filename, kinst_file) != 0 ||
	    (lf->flags & LINKER_FILE_LINKED) == 0))
		return (0);
	if (!kinst_registered)
		return (ENXIO);
	pd = arg;
	sx_xlock(&kinst_sx);
	kinst_going_check_locked();
	kinst_resolve_locked(lf);
	error = kinst_make_locked(pd->kpd_func, pd->kpd_off);
	sx_xunlock(&kinst_sx);
	return (error);
}

/*
 * Probes come from the table only, for a function named exactly (as stock
 * kinst, which compares each symbol's name with kpd_func).  A function the
 * table lacks, an excluded one, or an offset inside an instruction makes
 * nothing and answers 0; an offset whose instruction the table refuses is
 * EINVAL, as stock kinst answers popf.
 */
static int
kinst_ioctl(struct cdev *dev __unused, u_long cmd, caddr_t data,
    int flags __unused, struct thread *td __unused)
{
	dtrace_kinst_probedesc_t *pd;
	int error;

	if (cmd != KINSTIOC_MAKEPROBE)
		return (ENOTTY);
	pd = (dtrace_kinst_probedesc_t *)data;
	pd->kpd_func[sizeof(pd->kpd_func) - 1] = '\0';
	pd->kpd_mod[sizeof(pd->kpd_mod) - 1] = '\0';
	if (!kinst_mod_matches(pd->kpd_mod) || pd->kpd_func[0] == '\0' ||
	    kinst_isglob(pd->kpd_func))
		return (0);
	if (kinst_table_kernel) {
		sx_slock(&kinst_dev_sx);
		error = kinst_ioctl_file(linker_kernel_file, pd);
		sx_sunlock(&kinst_dev_sx);
	} else
		error = linker_file_foreach(kinst_ioctl_file, pd);
	return (error);
}

/*
 * The table is only as good as the image it was made from.  For a kernel
 * table the running kernel must have the same GNU build-id, which
 * sys/kern/kern_mib.c (sysctl_build_id, machine-independent) serves as
 * lowercase hex in kern.build_id from the note between __build_id_start and
 * __build_id_end.  Those symbols come from the kernel's linker script:
 * sys/conf/ldscript.amd64 and ldscript.arm64 bracket .note.gnu.build-id
 * with them.  This file reads only the sysctl, never the symbols, so it is
 * the same for every ISA; a kernel whose script does not bracket the note
 * (an older ldscript.riscv has no rule for it) gives no kern.build_id, and
 * a table with a build-id is then refused ("running kernel is (none)"):
 * the safe side, since that kernel cannot be shown to be the table's.  A
 * .ko's notes are not kept by the kernel linker, so a module table relies
 * on the per-function digest alone.
 */
static int
kinst_check_build_id(void)
{
	char name[] = "kern.build_id";
	char running[2 * 64 + 1];
	size_t len;

	if (!kinst_table_kernel || kinst_table.kt_build_id[0] == '\0')
		return (0);
	len = sizeof(running);
	if (kernel_sysctlbyname(curthread, name, running, &len, NULL, 0, NULL,
	    0) != 0 || len == 0)
		strlcpy(running, "(none)", sizeof(running));
	running[sizeof(running) - 1] = '\0';
	if (strcmp(running, kinst_table.kt_build_id) == 0)
		return (0);
	printf("kinst: table made for kernel build-id %s, running kernel is "
	    "%s: not loading\n", kinst_table.kt_build_id, running);
	return (ENOEXEC);
}

static int
kinst_load_file(linker_file_t lf, void *arg __unused)
{

	if (kinst_table_kernel || (strcmp(lf->filename, kinst_file) == 0 &&
	    (lf->flags & LINKER_FILE_LINKED) != 0)) {
		sx_xlock(&kinst_sx);
		kinst_resolve_locked(lf);
		sx_xunlock(&kinst_sx);
	}
	return (0);
}

/*
 * SI_SUB_DTRACE_PROVIDER, like stock kinst: after dtrace, and early enough for
 * anonymous enablings (SI_SUB_DTRACE_ANON).  A SYSINIT cannot fail, so an
 * error is kept for MOD_LOAD, which runs later (SI_SUB_DRIVERS) and fails the
 * load; kinst_unload() then undoes what was done.  Memory: the chains and one
 * byte per table function, nothing per table probe.
 */
static void
kinst_load(void *dummy __unused)
{
	const char *why;
	int error;

	/* Nothing reads the table before its structure is known sound. */
	if ((why = kinst_table_check(&kinst_table)) != KINST_TABLE_OK) {
		printf("kinst: the generated table is malformed (%s): not "
		    "loading\n", why);
		error = ENOEXEC;
		goto fail;
	}
	if ((error = kinst_check_build_id()) != 0)
		goto fail;
	kinst_probetab = mallocarray(KINST_PROBETAB_SIZE,
	    sizeof(*kinst_probetab), M_KINST, M_WAITOK | M_ZERO);
	kinst_fstate = malloc(MAX(kinst_table.kt_nfuncs, 1), M_KINST,
	    M_WAITOK | M_ZERO);
	if (kinst_table_kernel)
		(void)kinst_load_file(linker_kernel_file, NULL);
	else
		(void)linker_file_foreach(kinst_load_file, NULL);
	kinst_unload_try_tag = EVENTHANDLER_REGISTER(kld_unload_try,
	    kinst_kld_unload_try, NULL, EVENTHANDLER_PRI_FIRST);
	kinst_unload_tag = EVENTHANDLER_REGISTER(kld_unload, kinst_kld_unload,
	    NULL, EVENTHANDLER_PRI_ANY);
	/* Before dtrace_register(): an anonymous enabling arms at once. */
	dtrace_invop_add(kinst_invop);
	kinst_invop_added = true;
	error = dtrace_register("kinst", &kinst_attr, DTRACE_PRIV_USER, NULL,
	    &kinst_pops, NULL, &kinst_id);
	if (error != 0)
		goto fail;
	kinst_registered = true;
	kinst_cdev = make_dev(&kinst_cdevsw, 0, UID_ROOT, GID_WHEEL, 0600,
	    "dtrace/kinst");
	return;
fail:
	kinst_load_error = error;
}

/*
 * Runs after MOD_UNLOAD has unregistered the provider, which destroyed every
 * probe, and found no thread inside a trampoline (or after a failed load),
 * with kld_sx dropped.  What becomes of the trampoline pages is the ISA's:
 * see kinst_tramp_fini().
 */
static void
kinst_unload(void *dummy __unused)
{
	struct kinst_probe *kp;
	u_int i;

	if (kinst_cdev != NULL) {
		destroy_dev(kinst_cdev);
		kinst_cdev = NULL;
	}
	if (kinst_unload_try_tag != NULL)
		EVENTHANDLER_DEREGISTER(kld_unload_try, kinst_unload_try_tag);
	if (kinst_unload_tag != NULL)
		EVENTHANDLER_DEREGISTER(kld_unload, kinst_unload_tag);
	if (kinst_invop_added) {
		dtrace_invop_remove(kinst_invop);
		/* No CPU is still in kinst_invop() after this. */
		dtrace_sync();
		kinst_invop_added = false;
	}
	sx_xlock(&kinst_sx);
	kinst_reap();
	if (kinst_probetab != NULL) {
		/* None after dtrace_unregister(); a failed load made none. */
		for (i = 0; i < KINST_PROBETAB_SIZE; i++) {
			while ((kp = kinst_probetab[i]) != NULL) {
				kinst_probetab[i] = kp->kp_hashnext;
				free(kp, M_KINST);
			}
		}
		free(kinst_probetab, M_KINST);
		kinst_probetab = NULL;
	}
	free(kinst_fstate, M_KINST);
	kinst_fstate = NULL;
	kinst_tramp_fini();
	sx_xunlock(&kinst_sx);
}

/*
 * Unload fails with EBUSY while DTrace will not let the provider go (a
 * consumer has /dev/dtrace/dtrace open, or probes are enabled); stock kinst
 * ignores dtrace_unregister()'s answer.  It also fails with EBUSY, after the
 * provider is gone, while the ISA part cannot show that no thread is inside
 * a trampoline (kinst_tramp_quiesce(): arm64 and riscv, whose trampolines
 * end in a breakpoint only this module's handler answers).  It does not wait
 * for them: MOD_UNLOAD holds the kernel linker's kld_sx, which kldload,
 * kldstat and stack(9) symbol lookups wait for.  The module then stays
 * loaded with its breakpoint handler and trampolines, and without a
 * provider; a later kldunload asks again and never unregisters twice.
 */
static int
kinst_modevent(module_t mod __unused, int type, void *data __unused)
{
	int error;

	switch (type) {
	case MOD_LOAD:
		return (kinst_load_error);
	case MOD_UNLOAD:
		sx_xlock(&kinst_dev_sx);
		if (kinst_registered) {
			error = dtrace_unregister(kinst_id);
			if (error != 0) {
				sx_xunlock(&kinst_dev_sx);
				return (EBUSY);
			}
			kinst_registered = false;
		}
		sx_xunlock(&kinst_dev_sx);
		if (!kinst_tramp_quiesce()) {
			printf("kinst: not unloading: a thread is still inside "
			    "a trampoline, or left one through an exception; "
			    "the breakpoint handler and the trampolines stay "
			    "(kldunload again later)\n");
			return (EBUSY);
		}
		return (0);
	case MOD_QUIESCE:
	case MOD_SHUTDOWN:
		return (0);
	default:
		return (EOPNOTSUPP);
	}
}

SYSINIT(kinst_load, SI_SUB_DTRACE_PROVIDER, SI_ORDER_ANY, kinst_load, NULL);
SYSUNINIT(kinst_unload, SI_SUB_DTRACE_PROVIDER, SI_ORDER_ANY, kinst_unload,
    NULL);

DEV_MODULE(kinst, kinst_modevent, NULL);
MODULE_VERSION(kinst, 1);
MODULE_DEPEND(kinst, dtrace, 1, 1, 1);
MODULE_DEPEND(kinst, opensolaris, 1, 1, 1);
