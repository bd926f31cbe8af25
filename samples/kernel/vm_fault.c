/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * A miniature page-fault handler.  vm_fault() is the function the
 * dtrace_kinst(4) examples trace, so it is written to keep many values live
 * across calls: the compilers then save several callee-saved registers and
 * its prologue is "push %rbp; mov %rsp,%rbp; push %r15; ...", putting the
 * third instruction at offset 4.
 */

#include "sample.h"

struct vm_fault_stats {
	u_long	faults;
	u_long	zeroed;
	u_long	cow;
	u_long	busy;
	u_long	pageouts;
	u_long	errors;
};

struct vm_fault_stats vm_fault_stats;
int vm_fault_prefault_pages = 4;
int vm_fault_debug;
u_int vm_page_next_free;
struct vm_page vm_page_array[NPAGES];
static uint8_t vm_page_storage[NPAGES][64] __aligned(64);

/*
 * Same name as the handler in sys_generic.c: the image then has two local
 * symbols called sysctl_handle, told apart only by their STT_FILE.
 */
static __sample_func int
sysctl_handle(struct sysctl_oid *oidp, void *arg __unused, long *valp)
{
	struct vm_fault_stats *st;

	st = oidp->oid_arg;
	if (valp == NULL)
		return (EINVAL);
	*valp = (long)(st->faults - st->errors);
	return (0);
}

struct sysctl_oid sysctl_vm_fault_stats = {
	.oid_name = "vm.fault_stats",
	.oid_handler = sysctl_handle,
	.oid_arg = &vm_fault_stats,
};

__sample_func void
vm_map_lock(vm_map_t map)
{

	mtx_lock_spin_flags(&map->lock);
	map->timestamp++;
}

__sample_func void
vm_map_unlock(vm_map_t map)
{

	map->timestamp++;
	mtx_unlock_spin_flags(&map->lock);
}

__sample_func struct vm_map_entry *
vm_map_lookup_entry(vm_map_t map, vm_offset_t addr)
{
	struct vm_map_entry *entry;

	for (entry = map->header; entry != NULL; entry = entry->next) {
		if (addr >= entry->start && addr < entry->end)
			return (entry);
	}
	return (NULL);
}

__sample_func vm_page_t
vm_page_lookup(struct vm_object *object, vm_pindex_t pindex)
{
	u_int i;

	for (i = 0; i < vm_page_next_free; i++) {
		if (vm_page_array[i].object == object &&
		    vm_page_array[i].pindex == pindex)
			return (&vm_page_array[i]);
	}
	return (NULL);
}

__sample_func vm_page_t
vm_page_alloc(struct vm_object *object, vm_pindex_t pindex, int flags)
{
	vm_page_t m;
	u_int i;

	spinlock_enter();
	i = vm_page_next_free;
	if (i >= NPAGES) {
		spinlock_exit();
		return (NULL);
	}
	vm_page_next_free = i + 1;
	spinlock_exit();
	m = &vm_page_array[i];
	m->object = object;
	m->pindex = pindex;
	m->phys_addr = (vm_paddr_t)i << PAGE_SHIFT;
	m->valid_state = (flags & VM_FAULT_NOFILL) != 0 ? VPS_VALID :
	    VPS_INVALID;
	m->hold_count = 0;
	m->data = vm_page_storage[i];
	object->resident++;
	return (m);
}

__sample_func void
pmap_zero_page(vm_page_t m)
{

	memset(m->data, 0, sizeof(vm_page_storage[0]));
}

__sample_func void
pmap_enter(struct pmap *pmap, vm_offset_t va, vm_page_t m, vm_prot_t prot)
{
	u_int slot;

	slot = (va >> PAGE_SHIFT) & 511;
	pmap->pm_pml4[slot] = m->phys_addr | prot | 1;
	pmap->pm_resident++;
}

__sample_func vm_page_t
vm_fault_cow(struct vm_map_entry *entry, vm_page_t src)
{
	vm_page_t dst;

	dst = vm_page_alloc(entry->object, src->pindex + 0x100000,
	    VM_FAULT_NOFILL);
	if (dst == NULL)
		return (src);
	memcpy(dst->data, src->data, sizeof(vm_page_storage[0]));
	src->hold_count--;
	return (dst);
}

__sample_func void
vm_page_wait(vm_page_t m)
{

	while (m->valid_state == VPS_BUSY) {
		__asm __volatile("pause");
		m->valid_state = VPS_VALID;
	}
}

__sample_func int
vm_fault(vm_map_t map, vm_offset_t vaddr, vm_prot_t fault_type,
    int fault_flags, vm_page_t *m_hold)
{
	struct vm_map_entry *entry;
	vm_offset_t va, end;
	vm_pindex_t pindex;
	vm_page_t m;
	int error, i, npages;

	vm_map_lock(map);
	vm_fault_stats.faults++;
	entry = vm_map_lookup_entry(map, vaddr);
	if (entry == NULL) {
		error = KERN_INVALID_ADDRESS;
		goto out;
	}
	if ((entry->protection & fault_type) != fault_type) {
		error = KERN_PROTECTION_FAILURE;
		goto out;
	}
	npages = vm_fault_prefault_pages;
	if ((fault_flags & VM_FAULT_WIRE) != 0)
		npages = 1;
	error = KERN_SUCCESS;
	va = trunc_page(vaddr);
	end = entry->end;
	for (i = 0; i < npages && va < end; i++, va += PAGE_SIZE) {
		pindex = entry->offset + ((va - entry->start) >> PAGE_SHIFT);
		m = vm_page_lookup(entry->object, pindex);
		if (m == NULL) {
			m = vm_page_alloc(entry->object, pindex, fault_flags);
			if (m == NULL) {
				error = KERN_RESOURCE_SHORTAGE;
				break;
			}
		}
		switch (m->valid_state) {
		case VPS_INVALID:
			pmap_zero_page(m);
			m->valid_state = VPS_VALID;
			vm_fault_stats.zeroed++;
			break;
		case VPS_VALID:
			break;
		case VPS_COW:
			if ((fault_type & VM_PROT_WRITE) != 0) {
				m = vm_fault_cow(entry, m);
				vm_fault_stats.cow++;
			}
			break;
		case VPS_BUSY:
			vm_fault_stats.busy++;
			vm_page_wait(m);
			break;
		case VPS_PAGEOUT:
			vm_fault_stats.pageouts++;
			m->valid_state = VPS_VALID;
			dtrace_probe(7, (uintptr_t)map, va, fault_type, 0, 0);
			break;
		default:
			error = KERN_FAILURE;
			goto out;
		}
		pmap_enter(map->pmap, va, m, entry->protection & fault_type);
		if (i == 0 && m_hold != NULL) {
			m->hold_count++;
			*m_hold = m;
		}
		if (__predict_false(vm_fault_debug != 0))
			kdb_enter("vm_fault", "debug");
	}
out:
	vm_map_unlock(map);
	if (error != KERN_SUCCESS)
		vm_fault_stats.errors++;
	return (error);
}

__sample_func int
vm_fault_trap(vm_map_t map, vm_offset_t vaddr, vm_prot_t ftype)
{
	int rv;

	rv = vm_fault(map, vaddr, ftype, VM_FAULT_NORMAL, NULL);
	if (rv == KERN_SUCCESS)
		return (0);
	return (rv == KERN_PROTECTION_FAILURE ? EPERM : EFAULT);
}
