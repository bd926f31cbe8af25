/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_target.h: what the generated kinst_target.c defines, the image the
 * table was made for and kinst's exclusion list.  kinst_target.c is
 * rendered with the table (templates/kinst/kinst_target.c.j2) and holds
 * data only.  Include kinst_funcs.h first.
 */

#ifndef _KINST_TARGET_H_
#define	_KINST_TARGET_H_

/*
 * kinst_file is the linker file's name (lf->filename: "kernel", or the
 * .ko's file name); kinst_modname is the probes' module name, which is the
 * same name, ".ko" included, as stock kinst names its probes
 * (kinst:foo.ko:func:off).  kinst_table_kernel is 1 when the table was made
 * from an ET_EXEC kernel.
 */
extern const char	kinst_file[];
extern char		kinst_modname[];
extern const int	kinst_table_kernel;

/*
 * kinst_anchor indexes a function of kinst_table whose name is unique in
 * the image: its live address gives the load bias that maps every table
 * address to a live one.  -1: none, nothing can be resolved.
 */
extern const int	kinst_anchor;

/* One exclusion: a function name or name prefix, and why. */
struct kinst_exclusion {
	const char	*kx_name;
	const char	*kx_why;
};

/* The lists end with a null entry. */
extern const struct kinst_exclusion kinst_excluded_names[];
extern const struct kinst_exclusion kinst_excluded_prefixes[];
/* Prefixes that are allowed even though a shorter excluded prefix matches. */
extern const char *const kinst_excluded_exceptions[];

#endif /* !_KINST_TARGET_H_ */
