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

/*
 * The probes by patch address, as stock kinst's kinst_probetab: a power of
 * two of chains keyed by the address's low bits.  The breakpoint handler
 * walks a chain without a lock.
 */
#define	KINST_PROBETAB_SIZE	0x8000
#define	KINST_ADDR2NDX(addr)	((uintptr_t)(addr) & (KINST_PROBETAB_SIZE - 1))

/* struct kinst_probe kp_state */
#define	KINST_S_IDLE		0	/* never armed; traps are not ours */
#define	KINST_S_ARMED		1	/* int3 written */
#define	KINST_S_DISARMED	2	/* byte back; a trap may be in flight */

struct kinst_tslot;

/*
 * One DTrace probe: made when a probe description or the ioctl names its
 * function, freed after DTrace destroys it (see kinst_destroy()).  The
 * fields the breakpoint handler reads (kp_hashnext, kp_patchpoint,
 * kp_state, kp_id, kp_md, kp_tramp, kp_savedval) are set before the probe
 * is published in kinst_probetab or armed, and do not change while it is
 * armed.
 */
struct kinst_probe {
	struct kinst_probe	*kp_hashnext;	/* kinst_probetab chain */
	struct kinst_probe	*kp_gravenext;	/* destroyed, to be freed */
	uint8_t			*kp_patchpoint;	/* live instruction address */
	uint8_t			*kp_tramp;	/* set at enable (not calls) */
	struct kinst_tslot	*kp_tslot;	/* the address's trampoline */
	linker_file_t		kp_lf;		/* file of the patch point */
	const char		*kp_func;	/* name, in the table */
	struct kinst_md		kp_md;		/* from the verified bytes */
	dtrace_id_t		kp_id;
	uint32_t		kp_off;		/* in the function: the name */
	volatile u_int		kp_state;	/* KINST_S_* */
	uint8_t			kp_savedval;	/* the original first byte */
	bool			kp_reserved;	/* a trampoline is reserved */
	bool			kp_counted;	/* counted in kp_lf->nenabled */
	bool			kp_gone;	/* its linker file is going */
	uint8_t			kp_warned;	/* refusals printed */
};

struct trapframe;

MALLOC_DECLARE(M_KINST);

/* kinst.c */
extern struct sx		kinst_sx;	/* see "Locking" in kinst.c */
struct kinst_probe	*kinst_probe_at(uintptr_t);

/* <arch>/kinst_isa.c */
int	kinst_invop(uintptr_t, struct trapframe *, uintptr_t);
bool	kinst_patch(uint8_t *, uint8_t, uint8_t);
int	kinst_tramp_prepare(struct kinst_probe *);
int	kinst_tramp_take(struct kinst_probe *);
void	kinst_tramp_release(struct kinst_probe *);
void	kinst_tramp_fini(void);

#endif /* !_KINST_H_ */
