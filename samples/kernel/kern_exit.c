/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * Process exit and a context-switch routine written in C.  kinst excludes
 * cpu_switch by name, so it has a real body here.
 */

#include "sample.h"

struct exit_args {
	int	rval;
};

struct malloc_type M_VMSPACE[1] = { { .ks_shortdesc = "vmspace" } };
struct thread *runq_head;
u_long cpu_switch_count;
dtrace_id_t exit_probe_id = 3;

__sample_func struct thread *
sched_choose(void)
{
	struct thread *td;

	spinlock_enter();
	td = runq_head;
	if (td != NULL)
		runq_head = td->td_runq;
	spinlock_exit();
	return (td);
}

__sample_func void
cpu_switch(struct thread *old, struct thread *new, struct mtx *mtx)
{

	SAMPLE_FRAME();
	old->td_pcb.pcb_rbp = (register_t)__builtin_frame_address(0);
	old->td_pcb.pcb_rip = (register_t)__builtin_return_address(0);
	old->td_lock = mtx;
	cpu_switch_count++;
	if (new == NULL || new == old)
		return;
	new->td_state = 2;
	__asm __volatile("movq %0,%%gs:0" : : "r" (new) : "memory");
	__compiler_membar();
}

__sample_func void
exit1(struct thread *td, int rval, int signo)
{
	struct proc *p;
	struct file *fp;
	int fd;

	SAMPLE_FRAME();
	p = td->td_proc;
	mtx_lock_spin_flags(&p->p_mtx);
	p->p_flag |= P_WEXIT;
	p->p_xexit = rval;
	p->p_xsig = signo;
	mtx_unlock_spin_flags(&p->p_mtx);
	for (fd = 0; fd < NFILE; fd++) {
		fp = fdtable[fd];
		if (fp != NULL && fp->f_owner == p) {
			fdtable[fd] = NULL;
			free(fp, M_VMSPACE);
		}
	}
	if (p->p_vmspace != NULL && --p->p_vmspace->vm_refcnt == 0) {
		free(p->p_vmspace, M_VMSPACE);
		p->p_vmspace = NULL;
	}
	dtrace_probe(exit_probe_id, (uintptr_t)p, rval, signo, 0, 0);
	spinlock_enter();
	p->p_state = PRS_ZOMBIE;
	cpu_switch(td, sched_choose(), td->td_lock);
	spinlock_exit();
}

__sample_func int
sys_exit(struct thread *td, void *uap)
{
	struct exit_args *ap;

	ap = uap;
	exit1(td, ap->rval, 0);
	return (EJUSTRETURN);
}
