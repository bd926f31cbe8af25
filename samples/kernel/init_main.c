/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * The C side of the boot path: btext (locore.S) calls mi_startup(), which
 * touches everything once so that every sample function is reachable.
 */

#include "sample.h"

#define	RB_ZOO	0x10000

int boothowto;
struct proc proc0;
struct thread thread0;
struct vmspace vmspace0;
struct trapframe frame0;
uint64_t pml4_0[512];
struct pmap pmap0 = { .pm_pml4 = pml4_0 };

__sample_func void
mi_startup(void)
{
	struct thread *td;
	register_t flags;
	char buf[32];
	void *p;

	td = &thread0;
	td->td_proc = &proc0;
	td->td_frame = &frame0;
	proc0.p_thread = td;
	proc0.p_state = PRS_NORMAL;
	proc0.p_vmspace = &vmspace0;
	vmspace0.vm_refcnt = 1;
	vmspace0.vm_map.pmap = &pmap0;
	cpu_switch(td, td, NULL);
	flags = intr_disable();
	disable_intr();
	enable_intr();
	intr_restore(flags);
	kinst_dummy();
	p = malloc(sizeof(buf), M_TEMP, M_WAITOK | M_ZERO);
	free(p, M_TEMP);
	(void)dtrace_safe_copy((uintptr_t)&frame0, (uintptr_t)buf,
	    sizeof(buf));
	frame0.tf_trapno = T_SYSCALL;
	frame0.tf_rax = 4;
	trap_check(&frame0);
	if ((boothowto & RB_ZOO) != 0) {
		bcopy_nofp(&frame0, buf, sizeof(buf));
		(void)late_frame(1, 2);
		(void)zoo_loops(3);
		(void)zoo_calls(0);
		(void)zoo_jumps(boothowto & 3);
		(void)zoo_riprel();
		(void)zoo_misc(buf, &frame0, sizeof(buf));
		zoo_traps();
		zoo_far();
	}
	exit1(td, 0, 0);
}
