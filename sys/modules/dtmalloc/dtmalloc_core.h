/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * dtmalloc_core.h: the portable core of kinstkit's dtmalloc provider:
 * freestanding C99 that includes no system header at all, so that it
 * compiles and runs the same in the kernel and in a user-space test.  The
 * FreeBSD glue (dtmalloc.c) calls it.  What the target kernel was found to
 * hold (the table's size, the probe-name limit, the release) is rendered
 * into dtmalloc_target.h.
 */

#ifndef _DTMALLOC_CORE_H_
#define	_DTMALLOC_CORE_H_

#include "dtmalloc_target.h"

/*
 * The kernel's own integer types (style(9)) in a FreeBSD kernel build,
 * which has <sys/types.h>; the compiler's in any other build (a user-space
 * test, `invoke build`'s offline check without a sys/ tree), which then
 * needs no header at all.
 */
#if defined(_KERNEL) && defined(__FreeBSD__) && defined(__has_include)
#if __has_include(<sys/types.h>)
#define	DTMALLOC_SYS_TYPES
#endif
#endif

#ifdef DTMALLOC_SYS_TYPES
#include <sys/types.h>

typedef	uint8_t			dtmalloc_uint8_t;
typedef	uint32_t		dtmalloc_uint32_t;
typedef	size_t			dtmalloc_size_t;
#else
typedef	__UINT8_TYPE__		dtmalloc_uint8_t;
typedef	__UINT32_TYPE__		dtmalloc_uint32_t;
typedef	__SIZE_TYPE__		dtmalloc_size_t;
#endif

/*
 * A malloc type found in the target's files ahead of time.  The provider
 * does not take its probes from this table (it walks the kernel's live list,
 * so later types get probes too); the table says which types were expected.
 */
struct dtmalloc_known {
	const char	*dk_probe;	/* probe function name: the order */
	const char	*dk_name;	/* ks_shortdesc */
	const char	*dk_symbol;	/* MALLOC_DEFINE's; name@file: local */
	const char	*dk_file;	/* "kernel" or the module's file name */
};

extern const struct dtmalloc_known dtmalloc_known[DTMALLOC_NKNOWN];

void	dtmalloc_probe_name(char *dst, dtmalloc_size_t len,
	    const char *shortdesc);
int	dtmalloc_known_lookup(const char *probe);
int	dtmalloc_counter_enable(dtmalloc_uint32_t *count);
int	dtmalloc_counter_disable(dtmalloc_uint32_t *count);

#endif /* !_DTMALLOC_CORE_H_ */
