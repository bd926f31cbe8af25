/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * Trap and system-call entry.  amd64_syscall() dispatches through the
 * global sysent table (an indirect call through memory with an index
 * register) and calls an optional trace hook through a plain register.
 */

#include "sample.h"

#define	SYS_nosys	0
#define	SYS_exit	1
#define	SYS_read	3
#define	SYS_getpid	4
#define	SYS_ioctl	5

int (*dtrace_trap_func)(struct trapframe *frame, u_int trapno);
void (*volatile syscall_trace_hook)(struct thread *td, u_int code);
u_long trap_counts[32];
u_long syscall_count;

sy_call_t *sysent[NSYSCALL] = {
	[SYS_nosys] = sys_nosys,
	[SYS_exit] = sys_exit,
	[2] = sys_nosys,
	[SYS_read] = sys_read,
	[SYS_getpid] = sys_getpid,
	[SYS_ioctl] = sys_ioctl,
	[6] = sys_nosys,
	[7] = sys_nosys,
};

__sample_func int
sys_nosys(struct thread *td, void *uap __unused)
{

	td->td_retval[0] = -1;
	return (ENOSYS);
}

__sample_func int
sys_getpid(struct thread *td, void *uap __unused)
{

	td->td_retval[0] = td->td_proc->p_pid;
	return (0);
}

__sample_func void
amd64_syscall(struct thread *td, int traced)
{
	void (*hook)(struct thread *, u_int);
	struct trapframe *frame;
	register_t args[6];
	u_int code;
	int error;

	SAMPLE_FRAME();
	frame = td->td_frame;
	code = (u_int)frame->tf_rax;
	args[0] = frame->tf_rdi;
	args[1] = frame->tf_rsi;
	args[2] = frame->tf_rdx;
	args[3] = frame->tf_rcx;
	args[4] = frame->tf_r8;
	args[5] = frame->tf_r9;
	td->td_retval[0] = 0;
	td->td_retval[1] = frame->tf_rdx;
	if (code >= NSYSCALL)
		code = SYS_nosys;
	syscall_count++;
	hook = syscall_trace_hook;
	if (traced != 0 && hook != NULL)
		hook(td, code);
	error = sysent[code](td, args);
	switch (error) {
	case 0:
		frame->tf_rax = td->td_retval[0];
		frame->tf_rdx = td->td_retval[1];
		frame->tf_rflags &= ~PSL_C;
		break;
	case ERESTART:
		frame->tf_rip -= frame->tf_err;
		break;
	case EJUSTRETURN:
		break;
	default:
		frame->tf_rax = error;
		frame->tf_rflags |= PSL_C;
		break;
	}
}

__sample_func void
trap(struct trapframe *frame)
{
	struct thread *td;
	struct proc *p;
	int error;

	td = curthread;
	trap_counts[frame->tf_trapno & 31]++;
	switch (frame->tf_trapno) {
	case T_NMI:
		/* As sys/amd64/amd64/trap.c: a stack sample first. */
		if (stack_nmi_handler(frame) != 0)
			break;
		(void)nmi_handle_intr(T_NMI, frame);
		break;
	case T_PAGEFLT:
		p = td->td_proc;
		error = vm_fault_trap(&p->p_vmspace->vm_map,
		    (vm_offset_t)frame->tf_addr,
		    (frame->tf_err & 2) != 0 ? VM_PROT_WRITE : VM_PROT_READ);
		if (error != 0)
			exit1(td, 0, 11);
		break;
	case T_BPTFLT:
		kdb_enter("trap", "breakpoint");
		break;
	case T_PROTFLT:
		exit1(td, 0, 10);
		break;
	case T_SYSCALL:
		td->td_frame = frame;
		amd64_syscall(td, 0);
		break;
	default:
		db_print_backtrace();
		break;
	}
}

/*
 * Give DTrace the first look at a trap, as the kernel does; kinst must not
 * instrument this path, and excludes trap_check by name.
 */
__sample_func void
trap_check(struct trapframe *frame)
{

	SAMPLE_FRAME();
	if (dtrace_trap_func != NULL &&
	    dtrace_trap_func(frame, (u_int)frame->tf_trapno) != 0)
		return;
	trap(frame);
}
