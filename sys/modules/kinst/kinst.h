/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst.h: what the machine-independent glue (kinst.c) and the ISA part
 * (<arch>/kinst_isa.c) of kinstkit's kinst provider share, the same for
 * amd64, arm64 and riscv.  Include it after the kernel headers and
 * kinst_core.h; it includes <arch>/kinst_isa.h, which gives the one type
 * that differs (kinst_patchval_t).
 *
 * kinst.c owns the probes: it makes them from the table, keeps them by
 * address (kinst_probe_at() is the breakpoint handler's lookup), registers
 * with DTrace and decides when a probe is armed.  kinst_tramp.c owns the
 * trampoline slots: which probe gets which, reserved, filled, kept.  The
 * ISA part owns what touches the machine: the breakpoint handler
 * kinst_invop() (it fires the probe with dtrace_probe()), reading and
 * writing the patch point, the trampolines' pages and contents.  The calls,
 * in a probe's life:
 *
 *   made (kinst_sx held, may sleep): kp_md derived from the verified
 *     bytes, kp_savedval = kinst_isa_peek(kp, verified copy),
 *     kinst_tramp_prepare(kp) (finds the address's filled trampoline, or
 *     reserves one);
 *   enabled (dtrace_lock held, no sleep): kinst_tramp_take(kp), then
 *     kinst_isa_arm(kp), which writes the breakpoint only over kp_savedval;
 *   disabled (likewise): kinst_isa_disarm(kp), which writes kp_savedval
 *     back only over kp's own breakpoint;
 *   destroyed: kinst_tramp_release(kp);
 *   when a function's bytes are checked against the table:
 *     kinst_isa_unpatch(kp, copy) puts the original back in a copy.
 *
 * At unload, after dtrace_unregister() has destroyed every probe,
 * kinst_tramp_quiesce() says whether a thread may still be inside a
 * trampoline (see the ISA part); only when none is does the unload go on
 * to dtrace_invop_remove() and kinst_tramp_fini(), which frees the pages
 * or, with KINST_TRAMP_KEEP (the ISA part's kinst_isa.h), leaves them for
 * the next load.
 */

#ifndef _KINST_H_
#define	_KINST_H_

#include "kinst_isa.h"

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
#define	KINST_S_ARMED		1	/* breakpoint written */
#define	KINST_S_DISARMED	2	/* original back; a trap may follow */

/*
 * struct kinst_probe kp_jstate: a jump probe's state (amd64, with
 * debug.kinst.jump=1; see amd64/kinst_isa.c).  Other ISAs leave it NONE.
 */
#define	KINST_J_NONE		0	/* a breakpoint, nothing more */
#define	KINST_J_QUEUED		1	/* armed; the jump task will place it */
#define	KINST_J_PLACING		2	/* the task runs its protocol */
#define	KINST_J_JUMP		3	/* the jump is written */

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
	kinst_patchval_t	kp_savedval;	/* what the breakpoint covers */
	bool			kp_reserved;	/* a trampoline is reserved */
	bool			kp_counted;	/* counted in kp_lf->nenabled */
	bool			kp_gone;	/* its linker file is going */
	uint8_t			kp_warned;	/* refusals printed */
	uint32_t		kp_index;	/* its table probe index */
	u_int			kp_fidx;	/* its table function */
	/* Jump probes (amd64); kinst_jump_mtx guards all but kp_jvia. */
	struct kinst_probe	*kp_jnext;	/* the jump task's queue */
	uint8_t			*kp_detour;	/* filled once, kept */
	volatile u_int		kp_jvia;	/* a hit resumes: KINST_JV_* */
	u_int			kp_jstate;	/* KINST_J_* */
	u_int			kp_jgen;	/* bumped when it is undone */
	u_int			kp_jtries;	/* busy quiescence checks */
	uint8_t			kp_jorig[8];	/* original bytes under it */
};

struct trapframe;

MALLOC_DECLARE(M_KINST);

/* kinst.c */
extern struct sx		kinst_sx;	/* see "Locking" in kinst.c */
struct kinst_probe	*kinst_probe_at(uintptr_t);

/*
 * <arch>/kinst_isa.c.  kinst_isa_peek(): what is at 'p' (the patch point or
 * a copy of its bytes), as wide as kp's breakpoint.  kinst_isa_arm() and
 * kinst_isa_disarm(): false, and nothing written, when the patch point does
 * not hold what they expect (kp_savedval, kp's breakpoint).
 * kinst_tramp_quiesce(): true when no thread can be inside a trampoline;
 * it answers at once and never sleeps, since MOD_UNLOAD, its caller, holds
 * the kernel linker's kld_sx.
 */
int		kinst_invop(uintptr_t, struct trapframe *, uintptr_t);
kinst_patchval_t kinst_isa_peek(const struct kinst_probe *,
		    const volatile uint8_t *);
void		kinst_isa_unpatch(const struct kinst_probe *, uint8_t *);
bool		kinst_isa_arm(struct kinst_probe *);
bool		kinst_isa_disarm(struct kinst_probe *);
bool		kinst_tramp_quiesce(void);

/*
 * <arch>/kinst_isa.c, for kinst_tramp.c: what a trampoline is on this ISA.
 * kinst_isa_tramp_needed(): whether kp runs its instruction in one (not
 * when it is emulated).  kinst_isa_tpage_alloc(): a page for trampolines,
 * executable where it is returned, writable at *write; may sleep; NULL if
 * there is none.  kinst_isa_tpage_free(): that page back (ISAs without
 * KINST_TRAMP_KEEP).  kinst_isa_tramp_fill(): kp's trampoline, to run at
 * 'tramp', into the KINST_TRAMP_SIZE bytes of 'buf', and where its thread
 * resumes; NULL, or why it cannot be filled (nothing is then kept).
 * kinst_isa_tramp_sync(): freshly written trampoline bytes made visible to
 * instruction fetch on every CPU.
 */
bool		kinst_isa_tramp_needed(const struct kinst_probe *);
uint8_t		*kinst_isa_tpage_alloc(uint8_t **);
void		kinst_isa_tpage_free(uint8_t *);
const char	*kinst_isa_tramp_fill(const struct kinst_probe *, uintptr_t,
		    uint8_t *, uintptr_t *);
void		kinst_isa_tramp_sync(uint8_t *, size_t);

/*
 * kinst_tramp.c.  kinst_tramp_take(): NULL, or why the probe cannot be
 * enabled.  kinst_tramp_resume_at(): for a breakpoint handler, where the
 * thread at 'off' bytes into a filled trampoline resumes; 0 if the address
 * is no such place.
 */
int		kinst_tramp_prepare(struct kinst_probe *);
const char	*kinst_tramp_take(struct kinst_probe *);
void		kinst_tramp_release(struct kinst_probe *);
uintptr_t	kinst_tramp_resume_at(uintptr_t, uintptr_t);
void		kinst_tramp_fini(void);

#endif /* !_KINST_H_ */
