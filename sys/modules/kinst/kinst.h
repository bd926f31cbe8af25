/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst.h: what the machine-independent glue (kinst.c) and the ISA part
 * (<arch>/kinst_isa.c) of kinstkit's kinst provider share.  Include it after
 * the kernel headers and kinst_core.h.
 */

#ifndef _KINST_H_
#define	_KINST_H_

/* The ioctl libdtrace issues, as in sys/cddl/dev/kinst/kinst.h. */
typedef struct {
	char	kpd_func[DTRACE_FUNCNAMELEN];
	char	kpd_mod[DTRACE_MODNAMELEN];
	int	kpd_off;	/* -1: every instruction */
} dtrace_kinst_probedesc_t;

#define	KINSTIOC_MAKEPROBE	_IOW('k', 1, dtrace_kinst_probedesc_t)

/* struct kinst_probe kp_state */
#define	KINST_S_IDLE		0	/* unpatched; traps are not ours */
#define	KINST_S_ARMED		1	/* int3 written */
#define	KINST_S_DISARMED	2	/* byte back; a trap may be in flight */

struct kinst_probe {
	const struct kinst_entry *kp_entry;	/* the table row */
	uint8_t		*kp_patchpoint;		/* live instruction address */
	uint8_t		*kp_tramp;		/* trampoline; NULL for calls */
	uintptr_t	kp_tramp_pc;		/* patch point it serves */
	linker_file_t	kp_lf;			/* file of the patch point */
	dtrace_id_t	kp_id;			/* 0: not a DTrace probe now */
	volatile u_int	kp_state;		/* KINST_S_* */
	bool		kp_unreachable;		/* kp_tramp cannot be used */
	bool		kp_counted;		/* counted in kp_lf->nenabled */
	bool		kp_warned;		/* enable refusal printed */
};

struct trapframe;

MALLOC_DECLARE(M_KINST);

/* kinst.c */
extern struct sx		kinst_sx;	/* see "Locking" in kinst.c */
extern struct kinst_probe	**kinst_probes;	/* one slot per table entry */
extern uint64_t			kinst_bias;	/* live minus table address */

/* <arch>/kinst_isa.c */
int	kinst_invop(uintptr_t, struct trapframe *, uintptr_t);
void	kinst_patch(struct kinst_probe *, uint8_t);
uint8_t	*kinst_tramp_alloc(void);
void	kinst_tramp_free_all(void);

#endif /* !_KINST_H_ */
