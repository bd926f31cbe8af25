/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * The console: printf(9) and log(9) over one character output routine,
 * and panic(9), which ends in kern_reboot().  The image is only analysed.
 */

#include "sample.h"

typedef __builtin_va_list va_list;
#define	va_start(ap, last)	__builtin_va_start(ap, last)
#define	va_end(ap)		__builtin_va_end(ap)

volatile char cons_port;
char msgbuf[256];
u_int msgbuf_pos;
int rebooting;

__sample_func void
cnputc(int c)
{

	SAMPLE_FRAME();
	cons_port = (char)c;
	msgbuf[msgbuf_pos++ % sizeof(msgbuf)] = (char)c;
}

__sample_func int
kvprintf(const char *fmt, va_list ap __unused)
{
	int n;

	SAMPLE_FRAME();
	for (n = 0; fmt[n] != '\0'; n++)
		cnputc(fmt[n]);
	return (n);
}

__sample_func int
printf(const char *fmt, ...)
{
	va_list ap;
	int n;

	SAMPLE_FRAME();
	va_start(ap, fmt);
	n = kvprintf(fmt, ap);
	va_end(ap);
	return (n);
}

__sample_func void
log(int level, const char *fmt, ...)
{
	va_list ap;

	SAMPLE_FRAME();
	cnputc('<');
	cnputc('0' + level);
	cnputc('>');
	va_start(ap, fmt);
	(void)kvprintf(fmt, ap);
	va_end(ap);
}

__sample_func void
kern_reboot(int howto)
{

	SAMPLE_FRAME();
	rebooting = howto;
	for (;;)
		__compiler_membar();
}

__sample_func void
panic(const char *fmt, ...)
{
	va_list ap;

	SAMPLE_FRAME();
	va_start(ap, fmt);
	(void)kvprintf(fmt, ap);
	va_end(ap);
	kern_reboot(4);
}
