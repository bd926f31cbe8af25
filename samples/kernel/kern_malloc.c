/*
 * Sample for kinstkit -- not FreeBSD code.
 *
 * A toy allocator: power-of-two zones carved from a static arena, a
 * malloc/free pair on top, and the byte-copy helpers the compiler may call.
 */

#include "sample.h"

#define	ARENA_SIZE	(256 * 1024)
#define	NZONES		8
#define	MINALLOC_SHIFT	4

struct malloc_hdr {
	uma_zone_t	mh_zone;
	size_t		mh_size;
};

static uint8_t kmem_arena[ARENA_SIZE] __aligned(64);
static size_t kmem_arena_used;

struct uma_zone kmemzones[NZONES] = {
	{ .uz_name = "malloc-16", .uz_size = 16 },
	{ .uz_name = "malloc-32", .uz_size = 32 },
	{ .uz_name = "malloc-64", .uz_size = 64 },
	{ .uz_name = "malloc-128", .uz_size = 128 },
	{ .uz_name = "malloc-256", .uz_size = 256 },
	{ .uz_name = "malloc-512", .uz_size = 512 },
	{ .uz_name = "malloc-1024", .uz_size = 1024 },
	{ .uz_name = "malloc-2048", .uz_size = 2048 },
};

struct malloc_type M_TEMP[1] = { { .ks_shortdesc = "temp" } };

/*
 * The loops below carry a compiler barrier so that neither compiler turns
 * them back into calls to memcpy/memset (which would recurse here).
 */
__sample_func void *
memcpy(void *dst, const void *src, size_t len)
{
	uint8_t *d;
	const uint8_t *s;

	SAMPLE_FRAME();
	d = dst;
	s = src;
	while (len-- != 0) {
		*d++ = *s++;
		__compiler_membar();
	}
	return (dst);
}

__sample_func void *
memset(void *dst, int c, size_t len)
{
	uint8_t *d;

	d = dst;
	while (len-- != 0) {
		*d++ = (uint8_t)c;
		__compiler_membar();
	}
	return (dst);
}

static __sample_func void *
kmem_arena_alloc(size_t size)
{
	void *p;

	size = (size + 63) & ~(size_t)63;
	if (kmem_arena_used + size > ARENA_SIZE)
		return (NULL);
	p = &kmem_arena[kmem_arena_used];
	kmem_arena_used += size;
	return (p);
}

__sample_func void *
uma_zalloc_arg(uma_zone_t zone, void *udata, int flags)
{
	void *item;

	SAMPLE_FRAME();
	mtx_lock_spin_flags(&zone->uz_lock);
	item = zone->uz_free;
	if (item != NULL)
		zone->uz_free = *(void **)item;
	zone->uz_allocs++;
	mtx_unlock_spin_flags(&zone->uz_lock);
	if (item == NULL) {
		item = kmem_arena_alloc(zone->uz_size);
		if (item == NULL)
			return (NULL);
	}
	if (zone->uz_ctor != NULL &&
	    zone->uz_ctor(item, zone->uz_size, udata, flags) != 0) {
		uma_zfree_arg(zone, item, udata);
		return (NULL);
	}
	if ((flags & M_ZERO) != 0)
		memset(item, 0, zone->uz_size);
	return (item);
}

__sample_func void
uma_zfree_arg(uma_zone_t zone, void *item, void *udata __unused)
{

	if (item == NULL)
		return;
	mtx_lock_spin_flags(&zone->uz_lock);
	*(void **)item = zone->uz_free;
	zone->uz_free = item;
	mtx_unlock_spin_flags(&zone->uz_lock);
}

__sample_func void *
malloc(size_t size, struct malloc_type *mtp, int flags)
{
	struct malloc_hdr *mh;
	size_t need;
	int indx;

	SAMPLE_FRAME();
	need = size + sizeof(*mh);
	for (indx = 0; indx < NZONES; indx++) {
		if (need <= ((size_t)1 << (indx + MINALLOC_SHIFT)))
			break;
	}
	if (indx == NZONES)
		return (NULL);
	mh = uma_zalloc_arg(&kmemzones[indx], NULL, flags);
	if (mh == NULL)
		return (NULL);
	mh->mh_zone = &kmemzones[indx];
	mh->mh_size = size;
	mtp->ks_allocs++;
	mtp->ks_memuse += size;
	return (mh + 1);
}

__sample_func void
free(void *addr, struct malloc_type *mtp)
{
	struct malloc_hdr *mh;

	SAMPLE_FRAME();
	if (addr == NULL)
		return;
	mh = (struct malloc_hdr *)addr - 1;
	mtp->ks_frees++;
	mtp->ks_memuse -= mh->mh_size;
	uma_zfree_arg(mh->mh_zone, mh, NULL);
}
