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
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/malloc.h>
#include <sys/module.h>

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

static dtrace_provider_id_t dtmalloc_id;
static bool dtmalloc_registered;	/* dtmalloc_id is ours to unregister */
static dtmalloc_uint32_t dtmalloc_nenabled;
static dtmalloc_uint8_t dtmalloc_seen[DTMALLOC_NKNOWN];

/* Create the malloc and free probes of one type, unless its name has them. */
static void
dtmalloc_type_cb(struct malloc_type *mtp, void *arg __unused)
{
	struct malloc_type_internal *mtip;
	char name[DTRACE_FUNCNAMELEN];

	mtip = DTMALLOC_MTIP(mtp);
	dtmalloc_probe_name(name, sizeof(name), mtp->ks_shortdesc);
	if (dtrace_probe_lookup(dtmalloc_id, NULL, name, "malloc") != 0)
		return;
	(void)dtrace_probe_create(dtmalloc_id, NULL, name, "malloc", 0,
	    &mtip->mti_probes[DTMALLOC_PROBE_MALLOC]);
	(void)dtrace_probe_create(dtmalloc_id, NULL, name, "free", 0,
	    &mtip->mti_probes[DTMALLOC_PROBE_FREE]);
}

static void
dtmalloc_provide(void *arg __unused, dtrace_probedesc_t *desc)
{

	if (desc != NULL)
		return;
	malloc_type_list(dtmalloc_type_cb, NULL);
}

/* The probe argument is the type's probe-ID slot that kern_malloc.c reads. */
static void
dtmalloc_enable(void *arg __unused, dtrace_id_t id, void *parg)
{
	uint32_t *slot;

	slot = parg;
	*slot = id;
	if (dtmalloc_counter_enable(&dtmalloc_nenabled))
		dtrace_malloc_enabled = true;
}

static void
dtmalloc_disable(void *arg __unused, dtrace_id_t id __unused, void *parg)
{
	uint32_t *slot;

	slot = parg;
	*slot = 0;
	if (dtmalloc_counter_disable(&dtmalloc_nenabled))
		dtrace_malloc_enabled = false;
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
dtmalloc_destroy(void *arg __unused, dtrace_id_t id __unused,
    void *parg __unused)
{
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
