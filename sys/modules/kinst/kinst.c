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
 * core (<arch>/kinst_core.c) does the lookups, the trampoline fill, the byte
 * check and the call emulation.  The breakpoint hook, the patching of the
 * breakpoint byte and the trampoline pages are in <arch>/kinst_isa.c.
 * Design notes and the differences from stock kinst: docs/kinst-module.md.
 *
 * Probe lifecycle.  A probe is kinst:<module>:<function>:<offset>.  It is
 * created, once its function has been found in the running image, by the
 * provide callback (dtrace_open() asks for every probe, so "dtrace -l -P
 * kinst" lists the whole table), by the per-module provide callback when a
 * table's .ko loads, or by the KINSTIOC_MAKEPROBE ioctl.  Enabling checks the
 * live bytes against the table and writes int3 over the first byte;
 * disabling writes the byte back; destroying only marks the probe idle.  The
 * struct kinst_probe behind a table entry, and its trampoline, are allocated
 * the first time that entry becomes a probe and freed only at unload: the
 * breakpoint handler never touches freed memory, and a later probe for the
 * same entry reuses both.  Each trampoline is filled once, when its probe is
 * created and before it can be enabled, and never written again (see
 * kinst_isa.c for why that is safe).
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
#include <sys/proc.h>
#include <sys/queue.h>
#include <sys/sx.h>
#include <sys/sysctl.h>

#include <sys/dtrace.h>

#include <machine/atomic.h>

#include "kinst_core.h"
#include "kinst_target.h"
#include "kinst.h"

#define	KINST_AFRAMES		3	/* trap, dtrace_invop, kinst_invop */

/* Per table function: where it lives now. */
struct kinst_fstate {
	uintptr_t	fs_base;	/* live address; 0: not found */
	bool		fs_warned;	/* refusal printed */
};

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

/*
 * Locking.  kinst_sx serialises probe creation, function resolution and the
 * trampoline allocator; it is taken after dtrace_provider_lock (provide
 * callbacks) and after kld_sx (linker_file_foreach() callbacks, kld events)
 * and before dtrace_lock (dtrace_probe_lookup()/create()).  The enable,
 * disable and destroy callbacks run under dtrace_lock and take no lock of
 * ours.  kinst_dev_sx keeps the device's users (the kernel-table ioctl and
 * close, both outside kld_sx) away from the unload handler's
 * dtrace_unregister(); the .ko-table ioctl runs under kld_sx, which the unload
 * handler holds.  The breakpoint handler takes no lock.
 */
struct sx		kinst_sx;
static struct sx	kinst_dev_sx;
SX_SYSINIT(kinst_sx, &kinst_sx, "kinst");
SX_SYSINIT(kinst_dev_sx, &kinst_dev_sx, "kinst device");

static dtrace_provider_id_t	kinst_id;
static bool			kinst_registered;
static bool			kinst_invop_added;
static int			kinst_load_error;
static struct cdev		*kinst_cdev;
static eventhandler_tag		kinst_unload_try_tag;

struct kinst_probe		**kinst_probes;	/* one slot per table entry */
static struct kinst_fstate	*kinst_fstate;	/* one per table function */
static linker_file_t		kinst_lf;	/* resolved against; or NULL */
static int			kinst_lf_loadcnt;
uint64_t			kinst_bias;	/* live minus table address */

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

/* Could a probe description's module field name this table's file? */
static bool
kinst_mod_matches(const char *mod)
{

	return (mod[0] == '\0' || kinst_isglob(mod) ||
	    strcmp(mod, kinst_modname) == 0 || strcmp(mod, kinst_file) == 0);
}

static const char *
kinst_fname(u_int f)
{

	return (kinst_table.kt_funcs[f].kf_name);
}

/* The first position in kinst_byname whose name is not below 'name'. */
static u_int
kinst_byname_first(const char *name)
{
	u_int lo, hi, mid;

	lo = 0;
	hi = kinst_table.kt_nfuncs;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (strcmp(kinst_fname(kinst_byname[mid]), name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo);
}

/* Say once why function 'f' makes no probes: 'why', then 'where' (or ""). */
static void
kinst_fwarn(u_int f, const char *why, const char *where)
{

	if (kinst_fstate[f].fs_warned)
		return;
	kinst_fstate[f].fs_warned = true;
	printf("kinst: no probes in %s: %s%s\n", kinst_fname(f), why, where);
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
	const struct kinst_func *kf;

	kr = arg;
	kf = &kinst_table.kt_funcs[kinst_anchor];
	if (sv->size != kf->kf_size || strcmp(sv->name, kf->kf_name) != 0)
		return (0);
	kr->kr_bias = (uint64_t)(uintptr_t)sv->value - kf->kf_addr;
	kr->kr_found = true;
	return (1);
}

static int
kinst_match_cb(linker_file_t lf __unused, int symidx __unused,
    linker_symval_t *sv, void *arg)
{
	struct kinst_resolve *kr;
	const struct kinst_func *kf;
	u_int i, f;

	kr = arg;
	for (i = kinst_byname_first(sv->name); i < kinst_table.kt_nfuncs;
	    i++) {
		f = kinst_byname[i];
		kf = &kinst_table.kt_funcs[f];
		if (strcmp(kf->kf_name, sv->name) != 0)
			break;
		if (kf->kf_size == sv->size &&
		    kf->kf_addr + kr->kr_bias == (uint64_t)(uintptr_t)sv->value)
			kinst_fstate[f].fs_base = (uintptr_t)sv->value;
	}
	return (0);
}

static void
kinst_resolve_locked(linker_file_t lf)
{
	struct kinst_resolve kr;
	const struct kinst_func *kf;
	u_int f;

	sx_assert(&kinst_sx, SA_XLOCKED);
	if (lf == kinst_lf && lf->loadcnt == kinst_lf_loadcnt)
		return;
	kinst_lf = NULL;
	for (f = 0; f < kinst_table.kt_nfuncs; f++) {
		kinst_fstate[f].fs_base = 0;
		kinst_fstate[f].fs_warned = false;
	}
	if (kinst_anchor < 0)
		return;
	kf = &kinst_table.kt_funcs[kinst_anchor];
	kr.kr_bias = 0;
	kr.kr_found = false;
	(void)linker_file_function_listall(lf, kinst_anchor_cb, &kr);
	if (!kr.kr_found) {
		printf("kinst: %s has no %u-byte function %s: the table was "
		    "made from another image\n", lf->filename, kf->kf_size,
		    kf->kf_name);
		return;
	}
	(void)linker_file_function_listall(lf, kinst_match_cb, &kr);
	kinst_bias = kr.kr_bias;
	kinst_lf = lf;
	kinst_lf_loadcnt = lf->loadcnt;
}

/*
 * Make table entry 'ndx' a DTrace probe unless it is one already.  Its
 * function has been resolved.  The trampoline is filled here, once.
 */
static int
kinst_probe_make(u_int ndx)
{
	const struct kinst_entry *ke;
	const struct kinst_func *kf;
	struct kinst_probe *kp;
	uint8_t *pc, *tramp;
	char name[16];

	sx_assert(&kinst_sx, SA_XLOCKED);
	ke = &kinst_table.kt_entries[ndx];
	kf = &kinst_table.kt_funcs[ke->ke_func];
	pc = (uint8_t *)(kinst_fstate[ke->ke_func].fs_base + ke->ke_off);
	snprintf(name, sizeof(name), "%u", ke->ke_off);
	if (dtrace_probe_lookup(kinst_id, kinst_modname,
	    __DECONST(char *, kf->kf_name), name) != DTRACE_IDNONE)
		return (0);

	kp = kinst_probes[ndx];
	if (kp == NULL) {
		kp = malloc(sizeof(*kp), M_KINST, M_WAITOK | M_ZERO);
		kp->kp_entry = ke;
		atomic_store_rel_ptr((volatile uintptr_t *)&kinst_probes[ndx],
		    (uintptr_t)kp);
	}
	KASSERT(kp->kp_state == KINST_S_IDLE && !kp->kp_counted,
	    ("kinst: %s:%s created while live", kf->kf_name, name));
	if (!kinst_core_is_call(ke) &&
	    (kp->kp_tramp == NULL || kp->kp_tramp_pc != (uintptr_t)pc)) {
		if ((tramp = kinst_tramp_alloc()) == NULL) {
			printf("kinst: no trampoline memory for %s:%s\n",
			    kf->kf_name, name);
			return (ENOMEM);
		}
		/* The slot stays with the entry either way: no refill. */
		kp->kp_tramp = tramp;
		kp->kp_tramp_pc = (uintptr_t)pc;
		kp->kp_unreachable = kinst_core_tramp_fill(ke, (uintptr_t)pc,
		    tramp) != 0;
		if (kp->kp_unreachable)
			printf("kinst: no probe %s:%s: the trampoline at %p "
			    "cannot reach its target\n", kf->kf_name, name,
			    (void *)tramp);
	}
	if (kp->kp_unreachable)
		return (0);
	kp->kp_patchpoint = pc;
	kp->kp_lf = kinst_lf;
	kp->kp_warned = false;
	kp->kp_id = dtrace_probe_create(kinst_id, kinst_modname, kf->kf_name,
	    name, KINST_AFRAMES, kp);
	return (0);
}

/*
 * Create the table's probes of function 'func' (every function when NULL)
 * at offset 'off' (every instruction when -1), in the resolved file.
 */
static int
kinst_make_locked(const char *func, int off)
{
	const struct kinst_func *kf;
	const char *why, *where;
	u_int first, last, i, f, e;
	bool found, refused;
	int error;

	sx_assert(&kinst_sx, SA_XLOCKED);
	if (kinst_lf == NULL)
		return (0);
	if (func == NULL) {
		first = 0;
		last = kinst_table.kt_nfuncs;
	} else {
		first = last = kinst_byname_first(func);
		while (last < kinst_table.kt_nfuncs &&
		    strcmp(kinst_fname(kinst_byname[last]), func) == 0)
			last++;
	}
	found = refused = false;
	for (i = first; i < last; i++) {
		f = func == NULL ? i : kinst_byname[i];
		kf = &kinst_table.kt_funcs[f];
		why = kinst_excluded(kf->kf_name);
		where = "";
		if (why == NULL && kinst_fstate[f].fs_base == 0) {
			why = "not at its table address in ";
			where = kinst_file;
		}
		if (why != NULL) {
			kinst_fwarn(f, why, where);
			refused = true;
			continue;
		}
		for (e = kf->kf_first; e < kf->kf_first + kf->kf_count; e++) {
			if (off != -1 &&
			    kinst_table.kt_entries[e].ke_off != (uint32_t)off)
				continue;
			found = true;
			if ((error = kinst_probe_make(e)) != 0)
				return (error);
		}
	}
	if (func != NULL && off != -1 && !found && first < last) {
		/* As stock kinst answers an explicit popf or sti. */
		if (!refused)
			printf("kinst: %s:%d is not a probe of the generated "
			    "table (kinst_refused.txt says why)\n", func, off);
		return (EINVAL);
	}
	return (0);
}

/*
 * dtps_provide: every table probe, so that "dtrace -l -P kinst" lists them;
 * dtrace_open() asks with a NULL description.  A .ko table needs the file
 * resolved by an earlier load, ioctl or kld event: linker_file_foreach()
 * would take kld_sx under dtrace_provider_lock, the reverse of the kld
 * unload path's order.
 */
static void
kinst_provide(void *arg __unused, dtrace_probedesc_t *desc)
{
	const char *func;

	func = NULL;
	if (desc != NULL) {
		if (desc->dtpd_provider[0] != '\0' &&
		    !kinst_isglob(desc->dtpd_provider) &&
		    strcmp(desc->dtpd_provider, "kinst") != 0)
			return;
		if (!kinst_mod_matches(desc->dtpd_mod))
			return;
		if (desc->dtpd_func[0] != '\0' &&
		    !kinst_isglob(desc->dtpd_func))
			func = desc->dtpd_func;
	}
	sx_xlock(&kinst_sx);
	(void)kinst_make_locked(func, -1);
	sx_xunlock(&kinst_sx);
}

/* dtps_provide_module: the table's .ko has just been loaded. */
static void
kinst_provide_module(void *arg __unused, modctl_t *lf)
{

	if (kinst_table_kernel || strcmp(lf->filename, kinst_file) != 0)
		return;
	sx_xlock(&kinst_sx);
	kinst_resolve_locked(lf);
	(void)kinst_make_locked(NULL, -1);
	sx_xunlock(&kinst_sx);
}

/*
 * The table's .ko is about to go: forget it, so that no probe is made in it
 * between dtrace_module_unloaded(), which runs after this handler
 * (EVENTHANDLER_PRI_FIRST) and destroys its probes, and the unmapping.  An
 * unload that enabled probes will veto is left alone.
 */
static void
kinst_kld_unload_try(void *arg __unused, linker_file_t lf, int *error)
{

	if (*error != 0)
		return;
	sx_xlock(&kinst_sx);
	if (lf == kinst_lf && lf != linker_kernel_file && lf->nenabled == 0)
		kinst_lf = NULL;
	sx_xunlock(&kinst_sx);
}

static void
kinst_enable(void *arg __unused, dtrace_id_t id, void *parg)
{
	struct kinst_probe *kp;
	const char *why;

	kp = parg;
	kp->kp_id = id;
	why = NULL;
	if (kinst_core_check(kp->kp_entry, kp->kp_patchpoint) != 0)
		why = "the live bytes differ from the table's (another "
		    "provider's breakpoint, or another image)";
	if (why != NULL) {
		if (!kp->kp_warned) {
			kp->kp_warned = true;
			printf("kinst: not enabling %s:%s:%u: %s\n",
			    kinst_modname,
			    kinst_table.kt_funcs[kp->kp_entry->ke_func].kf_name,
			    kp->kp_entry->ke_off, why);
		}
		return;
	}
	kp->kp_counted = true;
	kp->kp_lf->nenabled++;
	atomic_store_rel_int(&kp->kp_state, KINST_S_ARMED);
	kinst_patch(kp, KINST_PATCHVAL);
}

static void
kinst_disable(void *arg __unused, dtrace_id_t id __unused, void *parg)
{
	struct kinst_probe *kp;

	kp = parg;
	if (!kp->kp_counted)
		return;
	if (kp->kp_state == KINST_S_ARMED) {
		kinst_patch(kp, kp->kp_entry->ke_orig[0]);
		atomic_store_rel_int(&kp->kp_state, KINST_S_DISARMED);
	}
	kp->kp_counted = false;
	kp->kp_lf->nenabled--;
}

/*
 * dtps_destroy: DTrace destroys only disabled probes, after the dtrace_sync()
 * that follows their disabling, so no trap for this probe is in flight.  The
 * structure and its trampoline stay for the next probe of this entry.
 */
static void
kinst_destroy(void *arg __unused, dtrace_id_t id __unused, void *parg)
{
	struct kinst_probe *kp;

	kp = parg;
	kp->kp_id = 0;
	atomic_store_rel_int(&kp->kp_state, KINST_S_IDLE);
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

	sx_slock(&kinst_dev_sx);
	if (kinst_registered)
		(void)dtrace_condense(kinst_id);
	sx_sunlock(&kinst_dev_sx);
	return (0);
}

/* KINSTIOC_MAKEPROBE in the table's file; the .ko case runs under kld_sx. */
static int
kinst_ioctl_file(linker_file_t lf, void *arg)
{
	dtrace_kinst_probedesc_t *pd;
	int error;

	if (!kinst_table_kernel && strcmp(lf->filename, kinst_file) != 0)
		return (0);
	if (!kinst_registered)
		return (ENXIO);
	pd = arg;
	sx_xlock(&kinst_sx);
	kinst_resolve_locked(lf);
	error = kinst_make_locked(pd->kpd_func, pd->kpd_off);
	sx_xunlock(&kinst_sx);
	return (error);
}

/*
 * Probes come from the table only.  A function it lacks makes nothing, as in
 * stock kinst; an offset it lacks is EINVAL, as stock kinst answers popf.
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
	if (!kinst_mod_matches(pd->kpd_mod))
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
 * table the running kernel must have the same GNU build-id: FreeBSD's
 * sys/conf/ldscript.amd64 brackets .note.gnu.build-id with __build_id_start
 * and __build_id_end, and sys/kern/kern_mib.c (sysctl_build_id) serves the
 * note's descriptor as lowercase hex in kern.build_id.  A .ko's notes are not
 * kept by the kernel linker, so a module table relies on the per-probe byte
 * check alone.
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

	if (kinst_table_kernel || strcmp(lf->filename, kinst_file) == 0) {
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
 * load; kinst_unload() then undoes what was done.
 */
static void
kinst_load(void *dummy __unused)
{
	int error;

	if ((error = kinst_check_build_id()) != 0)
		goto fail;
	kinst_probes = mallocarray(MAX(kinst_table.kt_nentries, 1),
	    sizeof(*kinst_probes), M_KINST, M_WAITOK | M_ZERO);
	kinst_fstate = mallocarray(MAX(kinst_table.kt_nfuncs, 1),
	    sizeof(*kinst_fstate), M_KINST, M_WAITOK | M_ZERO);
	if (kinst_table_kernel)
		(void)kinst_load_file(linker_kernel_file, NULL);
	else
		(void)linker_file_foreach(kinst_load_file, NULL);
	kinst_unload_try_tag = EVENTHANDLER_REGISTER(kld_unload_try,
	    kinst_kld_unload_try, NULL, EVENTHANDLER_PRI_FIRST);
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
 * Runs after MOD_UNLOAD has unregistered the provider (or after a failed
 * load), with kld_sx dropped.
 */
static void
kinst_unload(void *dummy __unused)
{
	u_int i;

	if (kinst_cdev != NULL) {
		destroy_dev(kinst_cdev);
		kinst_cdev = NULL;
	}
	if (kinst_unload_try_tag != NULL)
		EVENTHANDLER_DEREGISTER(kld_unload_try, kinst_unload_try_tag);
	if (kinst_invop_added) {
		dtrace_invop_remove(kinst_invop);
		/* No CPU is still in kinst_invop() after this. */
		dtrace_sync();
		kinst_invop_added = false;
	}
	if (kinst_probes != NULL) {
		for (i = 0; i < kinst_table.kt_nentries; i++)
			free(kinst_probes[i], M_KINST);
		free(kinst_probes, M_KINST);
		kinst_probes = NULL;
	}
	free(kinst_fstate, M_KINST);
	kinst_fstate = NULL;
	sx_xlock(&kinst_sx);
	kinst_tramp_free_all();
	sx_xunlock(&kinst_sx);
}

/*
 * Unload fails with EBUSY while DTrace will not let the provider go (a
 * consumer has /dev/dtrace/dtrace open, or probes are enabled); stock kinst
 * ignores dtrace_unregister()'s answer.
 */
static int
kinst_modevent(module_t mod __unused, int type, void *data __unused)
{
	int error;

	switch (type) {
	case MOD_LOAD:
		return (kinst_load_error);
	case MOD_UNLOAD:
		if (!kinst_registered)
			return (0);
		sx_xlock(&kinst_dev_sx);
		error = dtrace_unregister(kinst_id);
		if (error == 0)
			kinst_registered = false;
		sx_xunlock(&kinst_dev_sx);
		return (error != 0 ? EBUSY : 0);
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
