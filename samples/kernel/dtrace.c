/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * Stand-ins for the DTrace, DDB and kinst functions that kinst refuses to
 * instrument by name (dtrace_*, db_*, kdb_*, kinst_*), plus
 * dtrace_safe_copy(), whose dtrace_safe_ prefix is *not* excluded.  Each
 * has a real body so that only the name rules can refuse it.
 */

#include "sample.h"

#define	DTRACE_NPROBES	32
#define	DTRACE_BUFSIZE	256
#define	DB_MAXFRAMES	16

struct dtrace_ecb {
	struct dtrace_ecb	*dte_next;
	void			(*dte_action)(dtrace_id_t id, uintptr_t *args);
	u_long			dte_hits;
};

struct dtrace_ecb *dtrace_ecbs[DTRACE_NPROBES];
uintptr_t dtrace_buffer[DTRACE_BUFSIZE];
u_int dtrace_buffer_off;
vm_offset_t dtrace_toxic_lo = 0xffff800000000000UL;
vm_offset_t dtrace_toxic_hi = 0xffff808000000000UL;
volatile u_long kinst_dummy_calls;
const char *kdb_why;
int kdb_active;
char db_outbuf[1024];
u_int db_outoff;

__sample_func void
dtrace_probe(dtrace_id_t id, uintptr_t arg0, uintptr_t arg1, uintptr_t arg2,
    uintptr_t arg3, uintptr_t arg4)
{
	struct dtrace_ecb *ecb;
	uintptr_t args[5];
	register_t cookie;
	u_int off;

	SAMPLE_FRAME();
	if (id >= DTRACE_NPROBES)
		return;
	cookie = intr_disable();
	args[0] = arg0;
	args[1] = arg1;
	args[2] = arg2;
	args[3] = arg3;
	args[4] = arg4;
	for (ecb = dtrace_ecbs[id]; ecb != NULL; ecb = ecb->dte_next) {
		ecb->dte_hits++;
		off = dtrace_buffer_off;
		if (off + 6 > DTRACE_BUFSIZE)
			off = 0;
		dtrace_buffer[off] = id;
		memcpy(&dtrace_buffer[off + 1], args, sizeof(args));
		dtrace_buffer_off = off + 6;
		if (ecb->dte_action != NULL)
			ecb->dte_action(id, args);
	}
	intr_restore(cookie);
}

__sample_func int
dtrace_safe_copy(uintptr_t src, uintptr_t dst, size_t size)
{
	const volatile uint8_t *s;
	volatile uint8_t *d;
	size_t i;

	SAMPLE_FRAME();
	if (src + size < src || dst + size < dst)
		return (EFAULT);
	if ((src < dtrace_toxic_hi && src + size > dtrace_toxic_lo) ||
	    (dst < dtrace_toxic_hi && dst + size > dtrace_toxic_lo))
		return (EFAULT);
	s = (const volatile uint8_t *)src;
	d = (volatile uint8_t *)dst;
	for (i = 0; i < size; i++)
		d[i] = s[i];
	return (0);
}

static __sample_func void
db_putc(char c)
{

	if (db_outoff < sizeof(db_outbuf) - 1)
		db_outbuf[db_outoff++] = c;
}

__sample_func void
db_printhex(const char *tag, uint64_t v)
{
	int shift;

	while (*tag != '\0')
		db_putc(*tag++);
	db_putc('0');
	db_putc('x');
	for (shift = 60; shift >= 0; shift -= 4)
		db_putc("0123456789abcdef"[(v >> shift) & 0xf]);
	db_putc('\n');
}

__sample_func void
db_print_backtrace(void)
{
	uintptr_t *fp;
	int depth;

	SAMPLE_FRAME();
	fp = __builtin_frame_address(0);
	for (depth = 0; depth < DB_MAXFRAMES && fp != NULL; depth++) {
		if (((uintptr_t)fp & 7) != 0)
			break;
		db_printhex("#pc ", fp[1]);
		if ((uintptr_t)fp[0] <= (uintptr_t)fp)
			break;
		fp = (uintptr_t *)fp[0];
	}
}

__sample_func void
kdb_enter(const char *why, const char *msg)
{

	SAMPLE_FRAME();
	kdb_why = why;
	kdb_active++;
	db_printhex(msg, (uint64_t)(uintptr_t)why);
	db_print_backtrace();
	kdb_active--;
}

__sample_func void
kinst_dummy(void)
{

	SAMPLE_FRAME();
	kinst_dummy_calls++;
	__compiler_membar();
}
