/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * dtmalloc.c: the FreeBSD glue of kinstkit's dtmalloc provider; the portable
 * part is in dtmalloc_core.c and the generated dtmalloc_table.c, and what
 * the target kernel's ABI is -- compile-time checks of the sys/ tree against
 * it and the internal-struct expression -- in the generated dtmalloc_abi.h.
 * dtmalloc::<type>:malloc and :free for every malloc(9) type, with the
 * arguments of dtrace_dtmalloc(4) (mtp, mtip, mtsp, size, zindx; zindx 0 for
 * free).
 *
 * Like stock dtmalloc, probes come from the kernel's live malloc-type list
 * (malloc_type_list()) each time DTrace asks for probes, so types registered
 * after load get probes too; of several types with one probe name the first
 * one the list yields (the newest) gets them.  Unlike stock dtmalloc, unload
 * fails with EBUSY when dtrace_unregister() does, instead of unhooking
 * malloc(9) from a provider that is still registered, and load refuses to
 * take the malloc hook from another provider.
 *
 * A probe's argument is its own record (struct dtmalloc_probe), which
 * points at the type's probe-ID slot.  A type defined in a module lies in
 * that module's memory, freed when it is unloaded, while DTrace keeps the
 * probe (its module name is empty, so dtrace_module_unloaded() never takes
 * it): stock dtmalloc then writes freed memory at the next enable or
 * disable.  Here the kld events follow such an unload, in the order
 * sys/kern/kern_linker.c's linker_file_unload() runs them:
 *
 * - kld_unload_try: while a probe of a type in the file is enabled the
 *   unload is refused (one line); otherwise the file is "going" -- its
 *   slots are not written, an enable meanwhile is remembered -- because
 *   the unload may still be refused (MOD_QUIESCE, MOD_UNLOAD) and the
 *   memory goes before the kld_unload event;
 * - kld_unload, after the memory went: its probes are gone for good,
 *   never written again, and destroyed with dtrace_condense() unless an
 *   enabling holds them;
 * - a refused unload leaves the file LINKER_FILE_LINKED, and the next kld
 *   event finds it so, writes the slots of what was enabled meanwhile and
 *   lets the file's probes be used again.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/eventhandler.h>
#include <sys/kernel.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/module.h>
#include <sys/mutex.h>
#include <sys/queue.h>

#include <sys/dtrace.h>
#include <sys/dtrace_bsd.h>

#include "dtmalloc_core.h"
#include "dtmalloc_abi.h"

extern bool dtrace_malloc_enabled;

static void	dtmalloc_provide(void *arg, dtrace_probedesc_t *desc);
static void	dtmalloc_enable(void *arg, dtrace_id_t id, void *parg);
static void	dtmalloc_disable(void *arg, dtrace_id_t id, void *parg);
static void	dtmalloc_getargdesc(void *arg, dtrace_id_t id, void *parg,
		    dtrace_argdesc_t *desc);
static void	dtmalloc_destroy(void *arg, dtrace_id_t id, void *parg);

static dtrace_pattr_t dtmalloc_attr = {
	.dtpa_provider = { DTRACE_STABILITY_STABLE, DTRACE_STABILITY_STABLE,
	    DTRACE_CLASS_COMMON },
	.dtpa_mod = { DTRACE_STABILITY_PRIVATE, DTRACE_STABILITY_PRIVATE,
	    DTRACE_CLASS_UNKNOWN },
	.dtpa_func = { DTRACE_STABILITY_PRIVATE, DTRACE_STABILITY_PRIVATE,
	    DTRACE_CLASS_UNKNOWN },
	.dtpa_name = { DTRACE_STABILITY_STABLE, DTRACE_STABILITY_STABLE,
	    DTRACE_CLASS_COMMON },
	.dtpa_args = { DTRACE_STABILITY_STABLE, DTRACE_STABILITY_STABLE,
	    DTRACE_CLASS_COMMON },
};

static dtrace_pops_t dtmalloc_pops = {
	.dtps_provide = dtmalloc_provide,
	.dtps_enable = dtmalloc_enable,
	.dtps_disable = dtmalloc_disable,
	.dtps_getargdesc = dtmalloc_getargdesc,
	.dtps_destroy = dtmalloc_destroy,
};

/* Argument types, by index: dtrace_dtmalloc(4). */
static const char *dtmalloc_argtypes[] = {
	[0] = "struct malloc_type *",
	[1] = "struct malloc_type_internal *",
	[2] = "struct malloc_type_stats *",
	[3] = "unsigned long",
	[4] = "int",
};

/* A probe: its argument, made when DTrace asks for it, freed at destroy. */
struct dtmalloc_probe {
	LIST_ENTRY(dtmalloc_probe) dp_link;
	uint32_t	*dp_slot;	/* the type's mti_probes[] entry */
	dtrace_id_t	dp_id;
	bool		dp_enabled;	/* *dp_slot is dp_id where writable */
	bool		dp_gone;	/* the type's module was unloaded */
};

MALLOC_DEFINE(M_DTMALLOC, "dtmalloc", "kinstkit dtmalloc provider");

static dtrace_provider_id_t dtmalloc_id;
static bool dtmalloc_registered;	/* dtmalloc_id is ours to unregister */
static dtmalloc_uint32_t dtmalloc_nenabled;
static dtmalloc_uint8_t dtmalloc_seen[DTMALLOC_NKNOWN];
static eventhandler_tag dtmalloc_load_tag, dtmalloc_unload_try_tag;
static eventhandler_tag dtmalloc_unload_tag;

/*
 * dtmalloc_mtx guards the probe records and dtmalloc_going; the enable and
 * disable callbacks write a slot only under it, after asking whether they
 * may.  Taken inside dtrace_lock and kld_sx; nothing sleeps under it.
 */
static struct mtx dtmalloc_mtx;
MTX_SYSINIT(dtmalloc_mtx, &dtmalloc_mtx, "dtmalloc probes", MTX_DEF);
static LIST_HEAD(, dtmalloc_probe) dtmalloc_probes =
    LIST_HEAD_INITIALIZER(dtmalloc_probes);
static linker_file_t dtmalloc_going;	/* its unload is under way */

static bool
dtmalloc_in_file(linker_file_t lf, const void *p)
{

	return ((uintptr_t)p - (uintptr_t)lf->address < lf->size);
}

/* May dp's slot be written?  dtmalloc_mtx held. */
static bool
dtmalloc_writable(const struct dtmalloc_probe *dp)
{

	mtx_assert(&dtmalloc_mtx, MA_OWNED);
	return (!dp->dp_gone && (dtmalloc_going == NULL ||
	    !dtmalloc_in_file(dtmalloc_going, dp->dp_slot)));
}

/* Create the malloc and free probes of one type, unless its name has them. */
static void
dtmalloc_type_cb(struct malloc_type *mtp, void *arg __unused)
{
	struct malloc_type_internal *mtip;
	struct dtmalloc_probe *dp;
	char name[DTRACE_FUNCNAMELEN];
	int i;

	mtip = DTMALLOC_MTIP(mtp);
	dtmalloc_probe_name(name, sizeof(name), mtp->ks_shortdesc);
	if (dtrace_probe_lookup(dtmalloc_id, NULL, name, "malloc") != 0)
		return;
	for (i = 0; i < DTMALLOC_PROBE_MAX; i++) {
		dp = malloc(sizeof(*dp), M_DTMALLOC, M_WAITOK | M_ZERO);
		dp->dp_slot = &mtip->mti_probes[i];
		mtx_lock(&dtmalloc_mtx);
		LIST_INSERT_HEAD(&dtmalloc_probes, dp, dp_link);
		mtx_unlock(&dtmalloc_mtx);
		(void)dtrace_probe_create(dtmalloc_id, NULL, name,
		    i == DTMALLOC_PROBE_MALLOC ? "malloc" : "free", 0, dp);
	}
}

static void
dtmalloc_provide(void *arg __unused, dtrace_probedesc_t *desc)
{

	if (desc != NULL)
		return;
	malloc_type_list(dtmalloc_type_cb, NULL);
}

/*
 * Switch one probe: the type's probe-ID slot, which kern_malloc.c reads, gets
 * the probe's id (0 when off), and the global gate follows the count of
 * enabled probes.
 */
static void
dtmalloc_switch(struct dtmalloc_probe *dp, dtrace_id_t id, bool on)
{
	int edge;

	mtx_lock(&dtmalloc_mtx);
	if (on)
		dp->dp_id = id;
	dp->dp_enabled = on;
	if (dtmalloc_writable(dp))
		*dp->dp_slot = on ? id : 0;
	mtx_unlock(&dtmalloc_mtx);
	edge = on ? dtmalloc_counter_enable(&dtmalloc_nenabled) :
	    dtmalloc_counter_disable(&dtmalloc_nenabled);
	if (edge)
		dtrace_malloc_enabled = on;
}

static void
dtmalloc_enable(void *arg __unused, dtrace_id_t id, void *parg)
{

	dtmalloc_switch(parg, id, true);
}

static void
dtmalloc_disable(void *arg __unused, dtrace_id_t id, void *parg)
{

	dtmalloc_switch(parg, id, false);
}

static void
dtmalloc_getargdesc(void *arg __unused, dtrace_id_t id __unused,
    void *parg __unused, dtrace_argdesc_t *desc)
{

	if (desc->dtargd_ndx < 0 ||
	    desc->dtargd_ndx >= (int)nitems(dtmalloc_argtypes)) {
		desc->dtargd_ndx = DTRACE_ARGNONE;
		return;
	}
	strlcpy(desc->dtargd_native, dtmalloc_argtypes[desc->dtargd_ndx],
	    sizeof(desc->dtargd_native));
}

static void
dtmalloc_destroy(void *arg __unused, dtrace_id_t id __unused, void *parg)
{
	struct dtmalloc_probe *dp;

	dp = parg;
	mtx_lock(&dtmalloc_mtx);
	LIST_REMOVE(dp, dp_link);
	mtx_unlock(&dtmalloc_mtx);
	free(dp, M_DTMALLOC);
}

/*
 * A kld event (kld_sx held) while a file is going: if it is still
 * LINKER_FILE_LINKED its unload was refused, since the linker takes the flag
 * off only once every module agreed.  Then its probes are usable again, and
 * those enabled meanwhile get their slot.  dtmalloc_mtx held.
 */
static void
dtmalloc_going_check_locked(void)
{
	struct dtmalloc_probe *dp;
	linker_file_t lf;

	mtx_assert(&dtmalloc_mtx, MA_OWNED);
	if ((lf = dtmalloc_going) == NULL ||
	    (lf->flags & LINKER_FILE_LINKED) == 0)
		return;
	dtmalloc_going = NULL;
	LIST_FOREACH(dp, &dtmalloc_probes, dp_link) {
		if (dp->dp_enabled && !dp->dp_gone &&
		    dtmalloc_in_file(lf, dp->dp_slot))
			*dp->dp_slot = dp->dp_id;
	}
}

static void
dtmalloc_kld_load(void *arg __unused, linker_file_t lf __unused)
{

	mtx_lock(&dtmalloc_mtx);
	dtmalloc_going_check_locked();
	mtx_unlock(&dtmalloc_mtx);
}

/* Refuse the unload of a file holding an enabled probe's type. */
static void
dtmalloc_kld_unload_try(void *arg __unused, linker_file_t lf, int *error)
{
	struct dtmalloc_probe *dp;

	if (*error != 0 || lf == linker_kernel_file)
		return;
	mtx_lock(&dtmalloc_mtx);
	dtmalloc_going_check_locked();
	LIST_FOREACH(dp, &dtmalloc_probes, dp_link) {
		if (dp->dp_enabled && !dp->dp_gone &&
		    dtmalloc_in_file(lf, dp->dp_slot))
			break;
	}
	if (dp == NULL)
		dtmalloc_going = lf;
	mtx_unlock(&dtmalloc_mtx);
	if (dp != NULL) {
		*error = EBUSY;
		printf("dtmalloc: not unloading %s: a dtmalloc probe of a "
		    "malloc type it defines is enabled\n", lf->filename);
	}
}

/* The going file's memory went: its probes are gone, and destroyed. */
static void
dtmalloc_kld_unload(void *arg __unused, const char *filename __unused,
    caddr_t address, size_t size __unused)
{
	struct dtmalloc_probe *dp;
	linker_file_t lf;

	mtx_lock(&dtmalloc_mtx);
	lf = dtmalloc_going;
	if (lf == NULL || lf->address != address) {
		dtmalloc_going_check_locked();
		mtx_unlock(&dtmalloc_mtx);
		return;
	}
	LIST_FOREACH(dp, &dtmalloc_probes, dp_link) {
		if (dtmalloc_in_file(lf, dp->dp_slot))
			dp->dp_gone = true;
	}
	dtmalloc_going = NULL;
	mtx_unlock(&dtmalloc_mtx);
	/* Not under dtmalloc_mtx: destroy takes it. */
	if (dtmalloc_registered)
		(void)dtrace_condense(dtmalloc_id);
}

/* Mark a live type's name in the table of types expected at generation. */
static void
dtmalloc_seen_cb(struct malloc_type *mtp, void *arg)
{
	char name[DTRACE_FUNCNAMELEN];
	int *unknown, i;

	unknown = arg;
	dtmalloc_probe_name(name, sizeof(name), mtp->ks_shortdesc);
	i = dtmalloc_known_lookup(name);
	if (i < 0)
		(*unknown)++;
	else
		dtmalloc_seen[i] = 1;
}

/* Under bootverbose, say how the live types differ from the generated table. */
static void
dtmalloc_report(void)
{
	int i, missing, unknown;

	if (!bootverbose)
		return;
	unknown = 0;
	malloc_type_list(dtmalloc_seen_cb, &unknown);
	missing = 0;
	for (i = 0; i < DTMALLOC_NKNOWN; i++) {
		if (dtmalloc_seen[i] != 0)
			continue;
		missing++;
		printf("dtmalloc: type \"%s\" (%s in %s) is not registered\n",
		    dtmalloc_known[i].dk_name, dtmalloc_known[i].dk_symbol,
		    dtmalloc_known[i].dk_file);
	}
	printf("dtmalloc: %d of %d expected types registered, %d unexpected "
	    "(those get probes too)\n", DTMALLOC_NKNOWN - missing,
	    DTMALLOC_NKNOWN, unknown);
}

static int
dtmalloc_load(void)
{
	int error;

	if (dtrace_malloc_probe != NULL) {
		printf("dtmalloc: the malloc(9) probe hook is taken; "
		    "unload the other dtmalloc provider first\n");
		return (EEXIST);
	}
	error = dtrace_register("dtmalloc", &dtmalloc_attr,
	    DTRACE_PRIV_USER, NULL, &dtmalloc_pops, NULL, &dtmalloc_id);
	if (error != 0)
		return (error);
	dtmalloc_registered = true;
	dtmalloc_load_tag = EVENTHANDLER_REGISTER(kld_load, dtmalloc_kld_load,
	    NULL, EVENTHANDLER_PRI_ANY);
	dtmalloc_unload_try_tag = EVENTHANDLER_REGISTER(kld_unload_try,
	    dtmalloc_kld_unload_try, NULL, EVENTHANDLER_PRI_FIRST);
	dtmalloc_unload_tag = EVENTHANDLER_REGISTER(kld_unload,
	    dtmalloc_kld_unload, NULL, EVENTHANDLER_PRI_ANY);
	dtrace_malloc_probe = dtrace_probe;
	dtmalloc_report();
	return (0);
}

/*
 * Unregister first: it fails while any probe is enabled, and then the
 * module must stay, hooked, rather than leave the provider registered with
 * malloc(9) no longer calling it.
 *
 * A MOD_LOAD that failed is followed by MOD_UNLOAD (module_register_init()
 * in kern_module.c).  Then nothing was registered -- dtrace_unregister()
 * would dereference provider id 0 -- and the hook, if set, is another
 * provider's: both are left alone.
 */
static int
dtmalloc_unload(void)
{

	if (!dtmalloc_registered)
		return (0);
	if (dtrace_unregister(dtmalloc_id) != 0)
		return (EBUSY);
	dtmalloc_registered = false;
	dtrace_malloc_probe = NULL;
	EVENTHANDLER_DEREGISTER(kld_load, dtmalloc_load_tag);
	EVENTHANDLER_DEREGISTER(kld_unload_try, dtmalloc_unload_try_tag);
	EVENTHANDLER_DEREGISTER(kld_unload, dtmalloc_unload_tag);
	return (0);
}

static int
dtmalloc_modevent(module_t mod __unused, int type, void *data __unused)
{

	switch (type) {
	case MOD_LOAD:
		return (dtmalloc_load());
	case MOD_UNLOAD:
		return (dtmalloc_unload());
	case MOD_QUIESCE:
	case MOD_SHUTDOWN:
		return (0);
	default:
		return (EOPNOTSUPP);
	}
}

static moduledata_t dtmalloc_mod = {
	.name = "dtmalloc",
	.evhand = dtmalloc_modevent,
	.priv = NULL,
};

DECLARE_MODULE(dtmalloc, dtmalloc_mod, SI_SUB_DTRACE_PROVIDER, SI_ORDER_ANY);
MODULE_VERSION(dtmalloc, 1);
MODULE_DEPEND(dtmalloc, dtrace, 1, 1, 1);
MODULE_DEPEND(dtmalloc, opensolaris, 1, 1, 1);
