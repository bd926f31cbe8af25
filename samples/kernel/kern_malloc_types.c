/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * Malloc types registered the way a FreeBSD 14 kernel registers them, so
 * that `malloc-types` and `generate --provider dtmalloc` have real input in
 * the sample image: each MALLOC_DEFINE below leaves a struct malloc_type
 * (the 13+ layout, 112 bytes), a struct sysinit (the 14.0 layout, 32 bytes)
 * naming malloc_init, and a pointer to that sysinit in set_sysinit_set.
 *
 * This file does not include sample.h: the toy allocator's struct
 * malloc_type there (and its M_TEMP) predates it and keeps its own shape.
 */

typedef	unsigned int		uint32_t;
typedef	unsigned char		u_char;
typedef	unsigned long		u_long;

#define	NULL		((void *)0)

#define	SI_SUB_KMEM	0x1800000
#define	SI_ORDER_THIRD	0x0000002
#define	SI_ORDER_ANY	0xfffffff

/*
 * The release constants a FreeBSD kernel carries, those of the release the
 * sample stands for: generator/image/sample.py passes them (FreeBSD 14.3 by
 * default).  M_VERSION is the ks_version of this sample's types, what its
 * malloc_init accepts.
 */
#if !defined(SAMPLE_OSRELDATE) || !defined(SAMPLE_M_VERSION) || \
    !defined(SAMPLE_RELEASE)
#error "SAMPLE_OSRELDATE, SAMPLE_M_VERSION and SAMPLE_RELEASE come from the build"
#endif
#define	M_VERSION	SAMPLE_M_VERSION

int osreldate = SAMPLE_OSRELDATE;
char version[] = "FreeBSD " SAMPLE_RELEASE
    "-SAMPLE kinstkit sample kernel (not FreeBSD code)\n";

typedef	void (*sysinit_cfunc_t)(const void *);

struct sysinit {
	uint32_t	subsystem;
	uint32_t	order;
	struct {
		struct sysinit *stqe_next;
	}		next;
	sysinit_cfunc_t	func;
	const void	*udata;
};

struct malloc_type_internal {
	uint32_t	mti_probes[2];
	u_char		mti_zone;
	void		*mti_stats;
	u_long		mti_spare[8];
};

struct malloc_type {
	struct malloc_type *ks_next;
	u_long		ks_version;
	const char	*ks_shortdesc;
	struct malloc_type_internal ks_mti;
};

#define	SAMPLE_SYSINIT(uniq, set, sub, ord, fn, arg)			\
	static struct sysinit uniq = {					\
		.subsystem = (sub),					\
		.order = (ord),						\
		.func = (sysinit_cfunc_t)(fn),				\
		.udata = (arg),						\
	};								\
	static void *__set_##set##_sym_##uniq				\
	    __attribute__((__section__("set_" #set), __used__)) = &uniq

#define	SYSINIT(uniq, sub, ord, fn, arg)				\
	SAMPLE_SYSINIT(uniq##_sys_init, sysinit_set, sub, ord, fn, arg)
#define	SYSUNINIT(uniq, sub, ord, fn, arg)				\
	SAMPLE_SYSINIT(uniq##_sys_uninit, sysuninit_set, sub, ord, fn, arg)

#define	MALLOC_DEFINE(type, shortdesc, longdesc)			\
	struct malloc_type type[1] = {					\
		{ .ks_next = NULL, .ks_version = M_VERSION,		\
		    .ks_shortdesc = (shortdesc) }			\
	};								\
	SYSINIT(type##_init, SI_SUB_KMEM, SI_ORDER_THIRD, malloc_init, type); \
	SYSUNINIT(type##_uninit, SI_SUB_KMEM, SI_ORDER_ANY, malloc_uninit, type)

void	malloc_init(void *data);
void	malloc_uninit(void *data);
void	sysinit_run(void);

static struct malloc_type *kmemstatistics;
static int kmemcount;

/* Link a type in at the head of the list, as the real one does. */
void
malloc_init(void *data)
{
	struct malloc_type *mtp;

	mtp = data;
	if (mtp->ks_version != M_VERSION)
		return;
	mtp->ks_next = kmemstatistics;
	kmemstatistics = mtp;
	kmemcount++;
}

void
malloc_uninit(void *data)
{
	struct malloc_type **mtpp;

	for (mtpp = &kmemstatistics; *mtpp != NULL;
	    mtpp = &(*mtpp)->ks_next) {
		if (*mtpp == data) {
			*mtpp = (*mtpp)->ks_next;
			kmemcount--;
			return;
		}
	}
}

static void
kmem_report(void *arg)
{
	int *count;

	count = arg;
	*count = kmemcount;
}

static int kmem_types_at_boot;
SYSINIT(kmem_report, SI_SUB_KMEM, SI_ORDER_ANY, kmem_report,
    &kmem_types_at_boot);

extern struct sysinit *__start_set_sysinit_set[];
extern struct sysinit *__stop_set_sysinit_set[];

/* Run the linker set in link order (the sample never boots). */
void
sysinit_run(void)
{
	struct sysinit **sipp;

	for (sipp = __start_set_sysinit_set; sipp < __stop_set_sysinit_set;
	    sipp++)
		((*sipp)->func)((*sipp)->udata);
}

MALLOC_DEFINE(M_DEVBUF, "devbuf", "device driver memory");
MALLOC_DEFINE(M_CACHE, "cache", "various Buffers");
MALLOC_DEFINE(M_IOV, "iov", "large iov's");
MALLOC_DEFINE(M_SESSION, "session", "session header");
MALLOC_DEFINE(M_SUBPROC, "subproc", "Proc sub-structures");
MALLOC_DEFINE(M_PARGS, "proc-args", "Process arguments");
static MALLOC_DEFINE(M_BIOBUF, "BIO buffer", "BIO buffer");
static MALLOC_DEFINE(M_SELFD, "selfd", "selfd");
static MALLOC_DEFINE(M_IOCTLOPS, "ioctlops", "ioctl data buffer");
static MALLOC_DEFINE(M_SYSCTLTMP, "sysctltmp", "sysctl temporary buffers");
/* Two subsystems that picked one name: only one gets dtmalloc probes. */
static MALLOC_DEFINE(M_NCACHE, "cache", "name cache entries");
