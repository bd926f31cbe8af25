/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * The NMI path, shaped like an amd64 kernel's: trap() hands a T_NMI to
 * stack_nmi_handler(), which samples a thread's stack for another CPU
 * (procstat -kk, through stack(9)), then to nmi_handle_intr(), which asks
 * the chipset why with isa_nmi() and panics on a hardware error.  What
 * these call runs in NMI context too.  The image is only analysed.
 */

#include "sample.h"

struct stack *nmi_stack;
struct thread *volatile nmi_pending;
int panic_on_nmi = 1;
volatile uint8_t nmi_port;

__sample_func void
stack_zero(struct stack *st)
{
	int i;

	SAMPLE_FRAME();
	st->depth = 0;
	for (i = 0; i < STACK_MAX; i++)
		st->pcs[i] = 0;
}

__sample_func int
stack_put(struct stack *st, vm_offset_t pc)
{

	SAMPLE_FRAME();
	if (st->depth >= STACK_MAX)
		return (-1);
	st->pcs[st->depth++] = pc;
	return (0);
}

__sample_func void
stack_capture(struct thread *td __unused, struct stack *st, register_t fp)
{
	register_t *frame;

	SAMPLE_FRAME();
	stack_zero(st);
	for (frame = (register_t *)fp; frame != NULL;
	    frame = (register_t *)frame[0]) {
		if (stack_put(st, (vm_offset_t)frame[1]) == -1)
			break;
	}
}

__sample_func int
stack_nmi_handler(struct trapframe *tf)
{

	SAMPLE_FRAME();
	if (nmi_stack == NULL || curthread != nmi_pending)
		return (0);
	if ((tf->tf_rflags & PSL_I) != 0)
		stack_capture(curthread, nmi_stack, tf->tf_rbp);
	else
		nmi_stack->depth = 0;
	nmi_pending = NULL;
	return (1);
}

__sample_func int
isa_nmi(int cd)
{
	uint8_t why;

	SAMPLE_FRAME();
	why = nmi_port;
	log(2, "NMI ISA %x, EISA %x\n", why, cd);
	if ((why & 0x80) != 0) {
		printf("NMI: memory parity error\n");
		return (1);
	}
	if ((why & 0x40) != 0) {
		printf("NMI: I/O channel check\n");
		return (1);
	}
	return (0);
}

__sample_func int
nmi_handle_intr(u_int type, struct trapframe *frame)
{

	SAMPLE_FRAME();
	if (isa_nmi((int)frame->tf_err) != 0 && panic_on_nmi != 0)
		panic("NMI indicates hardware failure (trap %u)", type);
	return (0);
}
