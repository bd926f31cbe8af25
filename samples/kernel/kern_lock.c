/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * Spin locks and critical sections for the sample kernel.  kinst refuses
 * to instrument spinlock_enter, spinlock_exit and owner_* functions by
 * name, so these carry real bodies for the exclusion rules to look at.
 */

#include "sample.h"

volatile u_long spinlock_spins;

__sample_func void
critical_enter(void)
{
	struct thread *td;

	td = curthread;
	td->td_critnest++;
	__compiler_membar();
}

__sample_func void
critical_exit(void)
{
	struct thread *td;

	td = curthread;
	__compiler_membar();
	if (td->td_critnest == 1 && td->td_owepreempt != 0) {
		td->td_owepreempt = 0;
		td->td_critnest = 0;
		return;
	}
	td->td_critnest--;
}

__sample_func void
spinlock_enter(void)
{
	struct thread *td;
	register_t flags;

	SAMPLE_FRAME();
	td = curthread;
	if (td->td_md.md_spinlock_count == 0) {
		flags = intr_disable();
		td->td_md.md_spinlock_count = 1;
		td->td_md.md_saved_flags = flags;
		critical_enter();
	} else
		td->td_md.md_spinlock_count++;
}

__sample_func void
spinlock_exit(void)
{
	struct thread *td;
	register_t flags;

	SAMPLE_FRAME();
	td = curthread;
	flags = td->td_md.md_saved_flags;
	td->td_md.md_spinlock_count--;
	if (td->td_md.md_spinlock_count == 0) {
		critical_exit();
		intr_restore(flags);
	}
}

__sample_func int
owner_mtx(const struct mtx *m, struct thread **owner)
{
	uintptr_t v;

	SAMPLE_FRAME();
	v = m->mtx_lock;
	*owner = (struct thread *)(v & ~(uintptr_t)0x7);
	if (v == 0 || v == 0x4)
		return (0);
	return (1);
}

__sample_func void
mtx_lock_spin_flags(struct mtx *m)
{
	uintptr_t expected, tid;

	spinlock_enter();
	tid = (uintptr_t)curthread;
	if ((m->mtx_lock & ~(uintptr_t)0x7) == tid) {
		m->mtx_recurse++;
		return;
	}
	for (;;) {
		expected = 0;
		if (__atomic_compare_exchange_n(&m->mtx_lock, &expected, tid,
		    false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			break;
		spinlock_spins++;
		__asm __volatile("pause");
	}
}

__sample_func void
mtx_unlock_spin_flags(struct mtx *m)
{

	if (m->mtx_recurse != 0) {
		m->mtx_recurse--;
		return;
	}
	__atomic_store_n(&m->mtx_lock, 0, __ATOMIC_RELEASE);
	spinlock_exit();
}
