/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_target.h: what the generated kinst_harness_target.c defines, the
 * image the harness probes (templates/harness/kinst_harness_target.c.j2
 * renders it from the image; generator/run/harness.py's glue_context()).
 * Data only.  Include it after <stddef.h> and <stdint.h>.
 */

#ifndef _KH_TARGET_H_
#define	_KH_TARGET_H_

/* A loadable segment of the image at link time (its program header). */
struct kh_segment {
	uintptr_t	ks_vaddr;
	size_t		ks_memsz;
	int		ks_prot;	/* PROT_* */
};

extern const char		kh_target[];	/* its path */
extern const struct kh_segment	kh_segments[];
extern const int		kh_nsegments;
extern const uintptr_t		kh_image_lo;	/* lowest PT_LOAD */
extern const uintptr_t		kh_image_hi;	/* end of the highest */

/*
 * The GNU build-id: where its descriptor is at link time, and its
 * kh_build_id_len bytes (0: the image has none, nothing is checked).
 */
extern const uintptr_t		kh_build_id_vaddr;
extern const uint8_t		kh_build_id[];
extern const size_t		kh_build_id_len;

/*
 * Each table function's link address in the target, a little-endian u64
 * per function in table order (0: not there).  The table may have been
 * made from another build of the same code (harness --table-from).
 */
extern const uint8_t		kh_func_addr_blob[];

#endif /* !_KH_TARGET_H_ */
