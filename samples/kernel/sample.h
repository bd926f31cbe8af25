/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * Shared declarations for the "embedded default" sample kernel image.  The
 * sample is a small freestanding code base written in the style of a BSD
 * kernel so that kinstkit has a realistic amd64 image to analyse without
 * needing a real kernel.  The image is only analysed, never run.  No libc
 * headers are used; the few types needed are declared here.
 */

#ifndef _SAMPLE_H_
#define	_SAMPLE_H_

typedef	unsigned char		uint8_t;
typedef	unsigned short		uint16_t;
typedef	unsigned int		uint32_t;
typedef	unsigned long		uint64_t;
typedef	long			int64_t;
typedef	unsigned long		uintptr_t;
typedef	unsigned long		size_t;
typedef	long			ssize_t;
typedef	long			off_t;
typedef	long			register_t;
typedef	unsigned int		u_int;
typedef	unsigned long		u_long;
typedef	unsigned long		vm_offset_t;
typedef	unsigned long		vm_paddr_t;
typedef	unsigned long		vm_pindex_t;
typedef	unsigned char		vm_prot_t;
typedef	unsigned int		dtrace_id_t;
typedef	_Bool			bool;

#define	NULL		((void *)0)
#define	true		1
#define	false		0

/*
 * Every sample function is kept out of line and kept in the image even when
 * nothing calls it, so that each one is a separate, sized STT_FUNC symbol.
 * GCC may also clone functions (.constprop, .isra); forbid that so the
 * symbol names are exactly the source names.
 */
#if defined(__clang__)
#define	__sample_func	__attribute__((__noinline__, __used__))
#else
#define	__sample_func	__attribute__((__noinline__, __noclone__, __used__))
#endif
/*
 * GCC builds no frame for a function that needs no stack (a leaf, or a
 * function that only tail-calls), even with -fno-omit-frame-pointer, and
 * both compilers may shrink-wrap the prologue below an early return.  Real
 * kernels have such functions, and the sample keeps some (fget, memset,
 * uma_zfree_arg, ...), but the functions the analysis is tested on must be
 * ordinary "push %rbp; mov %rsp,%rbp" functions with either compiler.  They
 * start with SAMPLE_FRAME(), which uses the frame pointer before anything
 * else and so pins the prologue to the entry.  It emits no instruction.
 */
#define	SAMPLE_FRAME()	\
	__asm __volatile("" : : "r" (__builtin_frame_address(0)))
#define	__unused	__attribute__((__unused__))
#define	__aligned(x)	__attribute__((__aligned__(x)))
#define	__predict_false(x)	__builtin_expect((x), 0)
#define	__compiler_membar()	__asm __volatile(" " : : : "memory")

#define	PAGE_SHIFT	12
#define	PAGE_SIZE	(1UL << PAGE_SHIFT)
#define	PAGE_MASK	(PAGE_SIZE - 1)
#define	trunc_page(x)	((x) & ~PAGE_MASK)

/* Protection and fault flags. */
#define	VM_PROT_READ	0x01
#define	VM_PROT_WRITE	0x02
#define	VM_PROT_EXECUTE	0x04
#define	VM_FAULT_NORMAL	0x00
#define	VM_FAULT_WIRE	0x01
#define	VM_FAULT_NOFILL	0x02

/* Mach-style return codes of vm_fault(). */
#define	KERN_SUCCESS		0
#define	KERN_INVALID_ADDRESS	1
#define	KERN_PROTECTION_FAILURE	2
#define	KERN_RESOURCE_SHORTAGE	6
#define	KERN_FAILURE		5

/* Errors and pseudo-errors. */
#define	EPERM		1
#define	EBADF		9
#define	ENOMEM		12
#define	EFAULT		14
#define	EINVAL		22
#define	ENOTTY		25
#define	ENOSYS		78
#define	ERESTART	(-1)
#define	EJUSTRETURN	(-2)

/* malloc(9) flags. */
#define	M_NOWAIT	0x0001
#define	M_WAITOK	0x0002
#define	M_ZERO		0x0100

/* Trap numbers. */
#define	T_NMI		2
#define	T_BPTFLT	3
#define	T_PROTFLT	9
#define	T_PAGEFLT	12
#define	T_SYSCALL	0x80

#define	PSL_C		0x00000001
#define	PSL_I		0x00000200

#define	NFILE		16
#define	NSYSCALL	8
#define	NPAGES		64

struct mtx {
	volatile uintptr_t	mtx_lock;
	const char		*mtx_name;
	u_int			mtx_recurse;
};

struct trapframe {
	register_t	tf_rdi;
	register_t	tf_rsi;
	register_t	tf_rdx;
	register_t	tf_rcx;
	register_t	tf_r8;
	register_t	tf_r9;
	register_t	tf_rax;
	register_t	tf_rbp;
	register_t	tf_trapno;
	register_t	tf_addr;
	register_t	tf_err;
	register_t	tf_rip;
	register_t	tf_cs;
	register_t	tf_rflags;
	register_t	tf_rsp;
	register_t	tf_ss;
};

struct pcb {
	register_t	pcb_rbp;
	register_t	pcb_rsp;
	register_t	pcb_rip;
	register_t	pcb_flags;
};

struct mdthread {
	u_int		md_spinlock_count;
	register_t	md_saved_flags;
};

struct proc;

struct thread {
	struct proc		*td_proc;
	int			td_tid;
	int			td_state;
	u_int			td_critnest;
	int			td_owepreempt;
	register_t		td_retval[2];
	struct trapframe	*td_frame;
	struct mtx		*td_lock;
	struct pcb		td_pcb;
	struct mdthread		td_md;
	struct thread		*td_runq;
};

struct vmspace;

struct proc {
	int		p_pid;
	int		p_flag;
	int		p_state;
	int		p_xexit;
	int		p_xsig;
	struct mtx	p_mtx;
	struct vmspace	*p_vmspace;
	struct thread	*p_thread;
};

#define	P_WEXIT		0x2000
#define	PRS_NORMAL	1
#define	PRS_ZOMBIE	2

struct vm_object;

/* Page validity states, switched on by vm_fault(). */
#define	VPS_INVALID	0
#define	VPS_VALID	1
#define	VPS_COW		2
#define	VPS_BUSY	3
#define	VPS_PAGEOUT	4
#define	VPS_FICTITIOUS	5

struct vm_page {
	struct vm_object	*object;
	vm_pindex_t		pindex;
	vm_paddr_t		phys_addr;
	int			valid_state;
	int			hold_count;
	uint8_t			*data;
};
typedef	struct vm_page	*vm_page_t;

struct vm_object {
	int		ref_count;
	int		resident;
	vm_pindex_t	size;
};

struct vm_map_entry {
	struct vm_map_entry	*next;
	vm_offset_t		start;
	vm_offset_t		end;
	vm_prot_t		protection;
	struct vm_object	*object;
	vm_pindex_t		offset;
};

struct pmap {
	uint64_t	*pm_pml4;
	long		pm_resident;
};

struct vm_map {
	struct vm_map_entry	*header;
	int			nentries;
	u_int			timestamp;
	struct mtx		lock;
	struct pmap		*pmap;
};
typedef	struct vm_map	*vm_map_t;

struct vmspace {
	struct vm_map	vm_map;
	int		vm_refcnt;
};

struct malloc_type {
	const char	*ks_shortdesc;
	u_long		ks_allocs;
	u_long		ks_frees;
	u_long		ks_memuse;
};

typedef	int	(*uma_ctor)(void *mem, int size, void *arg, int flags);

struct uma_zone {
	const char	*uz_name;
	int		uz_size;
	u_long		uz_allocs;
	void		*uz_free;
	uma_ctor	uz_ctor;
	struct mtx	uz_lock;
};
typedef	struct uma_zone	*uma_zone_t;

struct file;
struct fileops {
	int	(*fo_read)(struct file *fp, void *buf, size_t len,
		    struct thread *td);
	int	(*fo_ioctl)(struct file *fp, u_long com, void *data,
		    struct thread *td);
};

struct file {
	const struct fileops	*f_ops;
	void			*f_data;
	struct proc		*f_owner;
	int			f_flag;
	off_t			f_offset;
};

struct sysctl_oid {
	const char	*oid_name;
	int		(*oid_handler)(struct sysctl_oid *oidp, void *arg,
			    long *valp);
	void		*oid_arg;
};

typedef	int	sy_call_t(struct thread *td, void *uap);

/* Reading curthread through %gs, as an amd64 kernel does. */
static __inline struct thread *
__curthread(void)
{
	struct thread *td;

	__asm("movq %%gs:0,%0" : "=r" (td));
	return (td);
}
#define	curthread	(__curthread())

/* cpufunc.c */
register_t	intr_disable(void);
void	intr_restore(register_t rflags);
void	enable_intr(void);
void	disable_intr(void);

/* kern_lock.c */
void	spinlock_enter(void);
void	spinlock_exit(void);
void	critical_enter(void);
void	critical_exit(void);
int	owner_mtx(const struct mtx *m, struct thread **owner);
void	mtx_lock_spin_flags(struct mtx *m);
void	mtx_unlock_spin_flags(struct mtx *m);

/* kern_malloc.c */
void	*malloc(size_t size, struct malloc_type *mtp, int flags);
void	free(void *addr, struct malloc_type *mtp);
void	*uma_zalloc_arg(uma_zone_t zone, void *udata, int flags);
void	uma_zfree_arg(uma_zone_t zone, void *item, void *udata);
void	*memcpy(void *dst, const void *src, size_t len);
void	*memset(void *dst, int c, size_t len);
extern struct malloc_type M_TEMP[1];

/* kern_exit.c */
void	exit1(struct thread *td, int rval, int signo);
void	cpu_switch(struct thread *old, struct thread *new, struct mtx *mtx);
struct thread *sched_choose(void);
int	sys_exit(struct thread *td, void *uap);

/* sys_generic.c */
int	kern_read(struct thread *td, int fd, void *buf, size_t nbyte);
int	sys_read(struct thread *td, void *uap);
int	kern_ioctl(struct thread *td, int fd, u_long com, void *data);
int	sys_ioctl(struct thread *td, void *uap);
struct file *fget(struct thread *td, int fd);
extern struct file *fdtable[NFILE];

/* trap.c */
void	amd64_syscall(struct thread *td, int traced);
void	trap(struct trapframe *frame);
void	trap_check(struct trapframe *frame);
int	sys_nosys(struct thread *td, void *uap);
int	sys_getpid(struct thread *td, void *uap);
extern sy_call_t *sysent[NSYSCALL];

/* vm_fault.c */
int	vm_fault(vm_map_t map, vm_offset_t vaddr, vm_prot_t fault_type,
	    int fault_flags, vm_page_t *m_hold);
int	vm_fault_trap(vm_map_t map, vm_offset_t vaddr, vm_prot_t ftype);
void	vm_map_lock(vm_map_t map);
void	vm_map_unlock(vm_map_t map);
struct vm_map_entry *vm_map_lookup_entry(vm_map_t map, vm_offset_t addr);
vm_page_t vm_page_lookup(struct vm_object *object, vm_pindex_t pindex);
vm_page_t vm_page_alloc(struct vm_object *object, vm_pindex_t pindex,
	    int flags);
void	vm_page_wait(vm_page_t m);
vm_page_t vm_fault_cow(struct vm_map_entry *entry, vm_page_t src);
void	pmap_zero_page(vm_page_t m);
void	pmap_enter(struct pmap *pmap, vm_offset_t va, vm_page_t m,
	    vm_prot_t prot);

/* dtrace.c */
void	dtrace_probe(dtrace_id_t id, uintptr_t arg0, uintptr_t arg1,
	    uintptr_t arg2, uintptr_t arg3, uintptr_t arg4);
int	dtrace_safe_copy(uintptr_t src, uintptr_t dst, size_t size);
void	db_print_backtrace(void);
void	db_printhex(const char *tag, uint64_t v);
void	kdb_enter(const char *why, const char *msg);
void	kinst_dummy(void);
extern int (*dtrace_trap_func)(struct trapframe *frame, u_int trapno);

/* init_main.c */
void	mi_startup(void);

/* stack_machdep.c: stack(9) and its NMI, and the chipset NMI */
#define	STACK_MAX	18
struct stack {
	int		depth;
	vm_offset_t	pcs[STACK_MAX];
};
void	stack_zero(struct stack *st);
int	stack_put(struct stack *st, vm_offset_t pc);
void	stack_capture(struct thread *td, struct stack *st, register_t fp);
int	stack_nmi_handler(struct trapframe *tf);
int	isa_nmi(int cd);
int	nmi_handle_intr(u_int type, struct trapframe *frame);

/* subr_prf.c */
int	printf(const char *fmt, ...);
void	log(int level, const char *fmt, ...);
void	panic(const char *fmt, ...);
void	kern_reboot(int howto);

/* locore.S */
void	btext(void);
void	bcopy_nofp(const void *src, void *dst, size_t len);
long	late_frame(long a, long b);
long	zoo_loops(long count);
void	zoo_traps(void);
void	zoo_far(void);
long	zoo_calls(long idx);
long	zoo_jumps(int sel);
int	zoo_riprel(void);
int	zoo_misc(void *dst, const void *src, size_t len);

#endif /* !_SAMPLE_H_ */
