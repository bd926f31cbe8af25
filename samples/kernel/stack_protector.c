/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * The two symbols a FreeBSD kernel exports for code built with
 * -fstack-protector, as every module built by kern.mk is: the canary and the
 * routine a clobbered canary calls.  The sample itself is built without the
 * protector (its probes stay what the C says), but a module linked against it
 * still needs both to resolve, as on a real kernel.
 */

#include "sample.h"

long __stack_chk_guard[8] = { 0x5a17c0de, 0x0defaced };

void	__stack_chk_fail(void) __attribute__((__noreturn__));

__sample_func void
__stack_chk_fail(void)
{

	/* A real kernel panics; the sample has no console, so it stops here. */
	for (;;)
		__asm __volatile("hlt");
}
