/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * Interrupt-flag helpers.  They are real out-of-line functions (not inline
 * macros) so that the image contains a one-byte popf, an sti and a cli
 * inside ordinary frame-pointer functions.
 */

#include "sample.h"

volatile u_long intr_toggles;

__sample_func register_t
intr_disable(void)
{
	register_t rflags;

	__asm __volatile("pushfq; popq %0; cli" : "=r" (rflags) : : "memory");
	intr_toggles++;
	return (rflags);
}

__sample_func void
intr_restore(register_t rflags)
{

	SAMPLE_FRAME();
	intr_toggles++;
	__asm __volatile("pushq %0; popfq" : : "r" (rflags) : "memory", "cc");
}

__sample_func void
enable_intr(void)
{

	SAMPLE_FRAME();
	intr_toggles++;
	__asm __volatile("sti" : : : "memory");
}

__sample_func void
disable_intr(void)
{

	SAMPLE_FRAME();
	__asm __volatile("cli" : : : "memory");
	intr_toggles++;
}
