/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * dtmalloc_core.c: the portable core of kinstkit's dtmalloc provider (see
 * dtmalloc_core.h): the probe-name rule of dtrace_dtmalloc(4), the lookup in
 * the generated table of the malloc types found ahead of time
 * (dtmalloc_table.c), and the enable counter.
 */

#include "dtmalloc_core.h"

/* The kernel's isspace(): the C locale's six whitespace characters. */
static int
dtmalloc_isspace(char c)
{

	return (c == ' ' || (c >= '\t' && c <= '\r'));
}

/*
 * Copy a malloc type's short description into a probe function name, as
 * stock dtmalloc does: truncated to len - 1 bytes like strlcpy(), with every
 * whitespace character turned into an underscore.
 */
void
dtmalloc_probe_name(char *dst, dtmalloc_size_t len, const char *shortdesc)
{
	dtmalloc_size_t i;

	if (len == 0)
		return;
	for (i = 0; i + 1 < len && shortdesc[i] != '\0'; i++)
		dst[i] = dtmalloc_isspace(shortdesc[i]) ? '_' : shortdesc[i];
	dst[i] = '\0';
}

/* strcmp() over unsigned bytes: the order the generator sorted the table in. */
static int
dtmalloc_strcmp(const char *a, const char *b)
{

	while (*a != '\0' && *a == *b) {
		a++;
		b++;
	}
	return ((int)(unsigned char)*a - (int)(unsigned char)*b);
}

/* Index of a probe name in dtmalloc_known[], or -1. */
int
dtmalloc_known_lookup(const char *probe)
{
	int cmp, hi, lo, mid;

	lo = 0;
	hi = DTMALLOC_NKNOWN - 1;
	while (lo <= hi) {
		mid = lo + (hi - lo) / 2;
		cmp = dtmalloc_strcmp(probe, dtmalloc_known[mid].dk_probe);
		if (cmp == 0)
			return (mid);
		if (cmp < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return (-1);
}

/*
 * Count enabled probes.  The hook flag the kernel tests before every
 * dtmalloc probe must go up with the first enabled probe and down with the
 * last; these return 1 exactly on those transitions.  DTrace serializes
 * enable and disable, so no atomics are needed.
 */
int
dtmalloc_counter_enable(dtmalloc_uint32_t *count)
{

	return (++*count == 1);
}

int
dtmalloc_counter_disable(dtmalloc_uint32_t *count)
{

	if (*count == 0)
		return (0);
	return (--*count == 0);
}
