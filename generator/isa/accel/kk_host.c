/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kk_host.c: the generic part of the analysis's walk (kk_host.h): a
 * function's rows, and what is made of them -- the counts of a summary,
 * the rows themselves for a table, the JSON record of every instruction.
 * The ISA's step (kk_isa_step()) finds and classifies each instruction;
 * everything printed here (the reasons, the kinds, the JSON record's
 * fields and keys) is data Python gave kk_init(), in the order its own
 * records have (generator/analysis/report.py).
 */

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kk_host.h"
#include "kk_fields.h"

static int kk_words(void);

/*
 * capstone, bound and opened for the ISA on first need (kk_decode()), and
 * its one instruction; kk_cs_failed once it could not be.
 */
static struct kk_capstone kk_csapi;
static csh kk_cs;
static cs_insn *kk_insn;
static int kk_cs_failed;

/* A refusal's reason: what the ISA's step puts first (the mnemonic), this, the text. */
#define	KK_REASON_JOIN	": "

/* What Python gave kk_init(); Python keeps what it points to alive. */
static struct kk_vocab kk_v;

/*
 * The JSON record of an instruction: its fields in order, each a key (the
 * text ,"key": or {"key": before the value), where its value comes from
 * and how it is written.
 */
struct kk_jfield {
	const char	*kj_key;
	uint32_t	 kj_source;	/* KK_S_* */
	uint32_t	 kj_off;	/* KK_S_ROW: its place in struct kk_row */
	uint32_t	 kj_size;
	uint32_t	 kj_type;	/* KK_S_ROW: KK_J_* */
};

/* Where a field's value comes from. */
#define	KK_S_OFFSET	0
#define	KK_S_ADDRESS	1
#define	KK_S_LENGTH	2
#define	KK_S_BYTES	3
#define	KK_S_MNEMONIC	4
#define	KK_S_OPERANDS	5
#define	KK_S_STATUS	6
#define	KK_S_REASON	7
#define	KK_S_KIND	8
#define	KK_S_TARGET	9
#define	KK_S_NULL	10	/* always null (a symbolic target) */
#define	KK_S_ROW	11	/* a field of the row */

/* How a KK_S_ROW field is written. */
#define	KK_J_INT	0	/* a number (kj_size bytes, signed or not) */
#define	KK_J_SINT	1
#define	KK_J_HEX	2	/* its bytes in hex, as a string */
#define	KK_J_BOOL	3
#define	KK_J_WORD	4	/* a 32-bit word as the string 0x%08x */
#define	KK_J_CLASS	5	/* a kr_class: its name */

/* For Python, which names these when it lays a record out. */
static const char kk_sources[] = "offset address length bytes mnemonic "
    "operands status reason kind target null row";
static const char kk_types[] = "int sint hex bool word class";

/*
 * The record's fields in parts: those that say where the instruction is,
 * up to kk_jplace; up to kk_jverdict; the verdict (status, reason, kind),
 * up to kk_jrest; the rest.  Only where it is and the verdict depend on
 * more than the bytes.
 */
static unsigned kk_jplace, kk_jverdict, kk_jrest;
#define	KK_JFIELDS	64
static size_t kk_jkeylen[KK_JFIELDS];

const char *
kk_json_sources(void)
{

	return (kk_sources);
}

const char *
kk_json_types(void)
{

	return (kk_types);
}

/* The row's layout, for Python: the generic fields, then the ISA's. */
static const struct kk_field kk_fields[] = {
	KK_FIELD(kr_target, 0),
	KK_FIELD(kr_off, 0),
	KK_FIELD(kr_text, 0),
	KK_FIELD(kr_len, 0),
	KK_FIELD(kr_reason, 0),
	KK_FIELD(kr_flags, 0),
	KK_FIELD(kr_class, 0),
	{ NULL, 0, 0, 0 }
};

/* The parts of the ISA's struct kinst_md Python reads (kk_fields.h). */
static const struct kk_field kk_isa_fields[] = { KK_ISA_FIELDS };

/* Field i of the row (the generic ones, then the ISA's), or NULL past the last. */
const struct kk_field *
kk_layout(unsigned i, uint32_t *rowsize)
{
	unsigned n;

	*rowsize = (uint32_t)sizeof(struct kk_row);
	for (n = 0; kk_fields[n].kf_name != NULL; n++)
		;
	if (i < n)
		return (&kk_fields[i]);
	i -= n;
	for (n = 0; kk_isa_fields[n].kf_name != NULL; n++)
		if (n == i)
			return (&kk_isa_fields[n]);
	return (NULL);
}

/*
 * Set the walk up with the ISA's vocabulary (Python keeps it alive): 0,
 * or KK_INIT_LAYOUT when *v is not the struct this file was built with
 * (or holds more JSON fields than it has room for).
 */
int
kk_init(const struct kk_vocab *v)
{
	unsigned i, n;
	const struct kk_jfield *f;

	if (v->kv_size != sizeof(*v) || v->kv_njfields > KK_JFIELDS)
		return (KK_INIT_LAYOUT);
	kk_v = *v;
	f = v->kv_jfields;
	n = v->kv_njfields;
	for (i = 0; i < n; i++)
		kk_jkeylen[i] = strlen(f[i].kj_key);
	for (kk_jplace = 0; kk_jplace < n &&
	    (f[kk_jplace].kj_source == KK_S_OFFSET ||
	    f[kk_jplace].kj_source == KK_S_ADDRESS); kk_jplace++)
		;
	for (kk_jverdict = kk_jplace; kk_jverdict < n &&
	    f[kk_jverdict].kj_source != KK_S_STATUS &&
	    f[kk_jverdict].kj_source != KK_S_REASON &&
	    f[kk_jverdict].kj_source != KK_S_KIND; kk_jverdict++)
		;
	for (kk_jrest = kk_jverdict; kk_jrest < n &&
	    (f[kk_jrest].kj_source == KK_S_STATUS ||
	    f[kk_jrest].kj_source == KK_S_REASON ||
	    f[kk_jrest].kj_source == KK_S_KIND); kk_jrest++)
		;
	if (kk_words() != 0)
		return (KK_INIT_LAYOUT);
	return (0);
}

/* The text of reason code 'code' (what follows the mnemonic). */
static const char *
kk_reason_text(unsigned code)
{

	return (code != 0 && code < kk_v.kv_nreasons ? kk_v.kv_reasons[code] :
	    "");
}

/* The reason code of a mnemonic refused by name, or 0. */
unsigned
kk_name_reason(const char *name)
{
	int lo, hi, mid, c;

	lo = 0;
	hi = (int)kk_v.kv_nnames - 1;
	while (lo <= hi) {
		mid = (lo + hi) / 2;
		c = strcmp(name, kk_v.kv_names[mid]);
		if (c == 0)
			return (kk_v.kv_name_codes[mid]);
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return (0);
}

/*
 * Rows already classified, by the instruction's bytes: a kernel's
 * instructions are two thirds repeats, and a row that depends on nothing
 * but the bytes (KK_R_CACHEABLE) is the same wherever they are.
 * Direct-mapped: a collision replaces the older entry, unless a row of the
 * function being walked uses it (kc_epoch): its text and its JSON stay
 * there until the function is written.  The keys (the bytes) are an array
 * of their own, small enough to stay in the CPU's cache; a slot's payload
 * is read only on a hit.
 */
#define	KK_CACHE_SLOTS	16384
#define	KK_CACHE_TEXT	112
#define	KK_CACHE_JSON	512
#define	KK_SLOT_TEXT	0xfffffffeu	/* kr_text: in the row's cache slot */

struct kk_ckey {
	uint8_t		ck_len;		/* 0: empty */
	uint8_t		ck_bytes[KINST_MAX_INSN];
};

struct kk_cached {
	struct kk_row	kc_row;
	uint32_t	kc_epoch;	/* the walk that last used it */
	uint16_t	kc_tlen;	/* 0: no text */
	uint16_t	kc_jlen;	/* 0: its JSON not written yet */
	uint16_t	kc_jverdict;	/* where the verdict starts in kc_json */
	uint16_t	kc_jrest;	/* where the fields after it start */
	char		kc_json[KK_CACHE_JSON];	/* its record but place */
	char		kc_text[KK_CACHE_TEXT];
};

static struct kk_ckey *kk_ckeys;
static struct kk_cached *kk_cache;
static unsigned long kk_cache_hits;
static uint32_t kk_epoch;	/* counts walks */

/*
 * The text arena of a walk: per row with text, three NUL-terminated
 * strings -- capstone's mnemonic and operands, and what the reason of a
 * refusal starts with (the ISA's choice: the mnemonic, or its last word).
 */
static char *kk_arena;
static size_t kk_alen, kk_acap;

static void
kk_text_reset(void)
{

	kk_alen = 0;
}

/* Room for n more bytes in the arena; NULL when there is none. */
static char *
kk_text_room(size_t n)
{
	size_t cap;
	char *p;

	if (kk_alen + n > kk_acap) {
		for (cap = kk_acap != 0 ? kk_acap : 1 << 16; cap < kk_alen + n;
		    cap *= 2)
			;
		if ((p = realloc(kk_arena, cap)) == NULL)
			return (NULL);
		kk_arena = p;
		kk_acap = cap;
	}
	return (kk_arena + kk_alen);
}

uint32_t
kk_text_add(const char *mnemonic, const char *operands, const char *prefix)
{
	size_t a, b, c;
	char *p;
	uint32_t at;

	a = strlen(mnemonic) + 1;
	b = strlen(operands) + 1;
	c = strlen(prefix) + 1;
	if ((p = kk_text_room(a + b + c)) == NULL)
		return (KK_NO_TEXT);
	at = (uint32_t)kk_alen;
	memcpy(p, mnemonic, a);
	memcpy(p + a, operands, b);
	memcpy(p + a + b, prefix, c);
	kk_alen += a + b + c;
	return (at);
}

/* String 'which' (0 mnemonic, 1 operands, 2 reason prefix) of a row's text. */
static const char *
kk_text(const struct kk_row *row, int which)
{
	const char *p;

	p = row->kr_text == KK_SLOT_TEXT ? kk_cache[row->kr_cache - 1].kc_text :
	    kk_arena + row->kr_text;
	while (which-- > 0)
		p += strlen(p) + 1;
	return (p);
}

unsigned long
kk_cache_hit_count(void)
{

	return (kk_cache_hits);
}

/* The slot of b[0, len), or -1 when there is no cache. */
static long
kk_cache_slot(const uint8_t *b, size_t len)
{
	uint32_t h;
	size_t i;

	if (kk_cache == NULL) {
		kk_ckeys = calloc(KK_CACHE_SLOTS, sizeof(*kk_ckeys));
		kk_cache = calloc(KK_CACHE_SLOTS, sizeof(*kk_cache));
		if (kk_ckeys == NULL || kk_cache == NULL) {
			free(kk_ckeys);
			free(kk_cache);
			kk_ckeys = NULL;
			kk_cache = NULL;
			return (-1);
		}
	}
	h = 2166136261u;	/* FNV-1a */
	for (i = 0; i < len; i++)
		h = (h ^ b[i]) * 16777619u;
	return ((long)(h & (KK_CACHE_SLOTS - 1)));
}

/*
 * Ask for n bytes at p to be in the CPU's cache: a walk's cached JSON is
 * read when its function is written, after the whole walk.
 */
static inline void
kk_prefetch(const char *p, size_t n)
{
#ifdef __GNUC__
	size_t i;

	for (i = 0; i < n; i += 64)
		__builtin_prefetch(p + i);
#else
	(void)p;
	(void)n;
#endif
}

/* Whether slot i holds the bytes b[0, len). */
static int
kk_cache_holds(long i, const uint8_t *b, size_t len)
{

	return (kk_ckeys[i].ck_len == len &&
	    memcmp(kk_ckeys[i].ck_bytes, b, len) == 0);
}

/* The row of b[0, len) into *row, its text added when 'text' asks; 0: none kept. */
int
kk_cache_get(const uint8_t *b, size_t len, int text, struct kk_row *row)
{
	struct kk_cached *c;
	long i;

	if (len > KINST_MAX_INSN || (i = kk_cache_slot(b, len)) < 0 ||
	    !kk_cache_holds(i, b, len))
		return (0);
	c = &kk_cache[i];
	if (text && c->kc_tlen == 0)
		return (0);
	*row = c->kc_row;
	if (text)
		kk_prefetch(c->kc_json, c->kc_jlen);
	row->kr_text = text ? KK_SLOT_TEXT : KK_NO_TEXT;
	row->kr_cache = (uint32_t)i + 1;
	c->kc_epoch = kk_epoch;
	kk_cache_hits++;
	return (1);
}

void
kk_cache_add(const uint8_t *b, size_t len, struct kk_row *row)
{
	struct kk_cached *c;
	const char *t;
	size_t n;
	long i;

	if (len > KINST_MAX_INSN || (row->kr_flags & KK_R_CACHEABLE) == 0 ||
	    (i = kk_cache_slot(b, len)) < 0)
		return;
	c = &kk_cache[i];
	if (kk_ckeys[i].ck_len != 0 && c->kc_epoch == kk_epoch)
		return;
	n = 0;
	if (row->kr_text != KK_NO_TEXT) {
		t = kk_arena + row->kr_text;
		n = strlen(t) + 1;
		n += strlen(t + n) + 1;
		n += strlen(t + n) + 1;
		if (n > KK_CACHE_TEXT)
			return;
		memcpy(c->kc_text, t, n);
	} else if (kk_cache_holds(i, b, len) && c->kc_tlen != 0)
		return;		/* keep the entry that has text */
	kk_ckeys[i].ck_len = (uint8_t)len;
	memcpy(kk_ckeys[i].ck_bytes, b, len);
	c->kc_row = *row;
	c->kc_tlen = (uint16_t)n;
	c->kc_jlen = 0;
	c->kc_epoch = kk_epoch;
	row->kr_cache = (uint32_t)i + 1;
}

/*
 * Load capstone from kv_capstone, bind its entry points and open it for
 * the ISA: 0, or -1 (for good) when any of that fails.
 */
static int
kk_capstone_open(void)
{
	void *h;

	if (kk_cs_failed || kk_v.kv_capstone == NULL ||
	    (h = dlopen(kk_v.kv_capstone, RTLD_NOW | RTLD_LOCAL)) == NULL)
		goto fail;
	/* POSIX's way to a function pointer from dlsym(). */
	*(void **)&kk_csapi.kcs_open = dlsym(h, "cs_open");
	*(void **)&kk_csapi.kcs_option = dlsym(h, "cs_option");
	*(void **)&kk_csapi.kcs_malloc = dlsym(h, "cs_malloc");
	*(void **)&kk_csapi.kcs_disasm_iter = dlsym(h, "cs_disasm_iter");
	if (kk_csapi.kcs_open == NULL || kk_csapi.kcs_option == NULL ||
	    kk_csapi.kcs_malloc == NULL || kk_csapi.kcs_disasm_iter == NULL ||
	    kk_isa_open(&kk_csapi, &kk_cs) != 0 ||
	    (kk_insn = kk_csapi.kcs_malloc(kk_cs)) == NULL)
		goto fail;
	return (0);
fail:
	kk_cs_failed = 1;
	return (-1);
}

/*
 * capstone's reading of the instruction at code[off, len), of a function
 * at 'address' (valid until the next call), or NULL when it cannot decode
 * it (or capstone cannot be loaded: the function is then Python's).
 */
const cs_insn *
kk_decode(const uint8_t *code, size_t len, size_t off, uint64_t address)
{
	const uint8_t *p;
	size_t n;
	uint64_t a;

	if (kk_insn == NULL && kk_capstone_open() != 0)
		return (NULL);
	p = code + off;
	n = len - off;
	a = address + off;
	return (kk_csapi.kcs_disasm_iter(kk_cs, &p, &n, &a, kk_insn) ?
	    kk_insn : NULL);
}

/*
 * The row of the instruction code[off, off + len) of a function at
 * 'address' from capstone's text for it (kk_isa_classify()), kept in the
 * cache when 'cache' allows, with its text when 'text' asks: KK_NEXT, or
 * kk_isa_classify()'s KK_ERROR.
 */
int
kk_decoded_row(const uint8_t *code, size_t off, size_t len, uint64_t address,
    int text, int cache, const char *mnemonic, const char *operands,
    struct kk_row *row)
{
	int rv;

	rv = kk_isa_classify(code + off, len, address + off, mnemonic,
	    operands, row);
	if (rv != KK_NEXT)
		return (rv);
	row->kr_off = (uint32_t)off;
	if (cache)
		kk_cache_add(code + off, len, row);
	if (text == KK_TEXT_NONE)
		row->kr_text = KK_NO_TEXT;
	return (KK_NEXT);
}

/* A function's rows, reused from one function to the next. */
static struct kk_row *kk_rows;
static size_t kk_nrows, kk_rcap;

/*
 * A summary's counters per function (kk_summarise()): how many
 * instructions (KK_DEFERRED when Python must do the function), the
 * prologue rules it passes (bit i: the ISA's rule i), how many are
 * refused, and how many of each table kind can be probed.
 */
#define	KK_DEFERRED	0xffffffffu
#define	KK_COL_N	0
#define	KK_COL_PROLOGUE	1
#define	KK_COL_REFUSED	2
#define	KK_COL_KIND	3

/*
 * Walk the function code[0, limit) at 'address' (code[limit, len) is the
 * section's tail, for an instruction that straddles the end) into
 * kk_rows: KK_NEXT when every instruction is classified, else KK_DEFER or
 * KK_ERROR.  col, unless NULL, receives a summary's counts of refused
 * rows and of each kind, as each row is made: a second pass over the rows
 * would read them all again.
 */
static inline int
kk_walk(const uint8_t *code, size_t len, size_t limit, uint64_t address,
    int text, uint32_t *col)
{
	struct kk_row *p, *row;
	struct kk_fn fn;
	size_t off, n;
	uint32_t refused;
	unsigned nkinds;
	int rv;

	fn.kn_code = code;
	fn.kn_len = len;
	fn.kn_limit = limit;
	fn.kn_address = address;
	fn.kn_text = text;
	kk_text_reset();
	kk_epoch++;
	/* In locals: the step, in another file, could change any global. */
	nkinds = kk_v.kv_nkinds;
	refused = 0;
	rv = KK_NEXT;
	for (off = n = 0, row = kk_rows; off < limit; off += row->kr_len,
	    row++, n++) {
		if (n == kk_rcap) {
			if ((p = realloc(kk_rows, (kk_rcap != 0 ? 2 * kk_rcap :
			    4096) * sizeof(*p))) == NULL) {
				rv = KK_DEFER;
				break;
			}
			kk_rows = p;
			kk_rcap = kk_rcap != 0 ? 2 * kk_rcap : 4096;
			row = kk_rows + n;
		}
		rv = kk_isa_step(&fn, off, row);
		if (rv != KK_NEXT)
			break;
		if (off + row->kr_len > limit) {
			rv = KK_DEFER;	/* past the symbol's end */
			break;
		}
		if (col == NULL)
			continue;
		if (row->kr_reason != 0)
			refused++;
		else if (row->kr_md.km_kind < nkinds)
			col[KK_COL_KIND + row->kr_md.km_kind]++;
	}
	if (col != NULL)
		col[KK_COL_REFUSED] = refused;
	kk_nrows = n;
	return (rv);
}

/*
 * The summary of nfunc functions of buf, which is at address 'base':
 * function k is buf[start[k], start[k] + limit[k]), with the section's
 * bytes after it to buf's end.  out[] receives kk_summary_columns()
 * counters (KK_COL_*) per function.
 */

unsigned
kk_summary_columns(void)
{

	return (KK_COL_KIND + kk_v.kv_nkinds);
}

/* For Python: where kk_summarise()'s counters are, and what marks a deferred function. */
void
kk_summary_layout(unsigned *n, unsigned *prologue, unsigned *refused,
    unsigned *kind, uint32_t *deferred)
{

	*n = KK_COL_N;
	*prologue = KK_COL_PROLOGUE;
	*refused = KK_COL_REFUSED;
	*kind = KK_COL_KIND;
	*deferred = KK_DEFERRED;
}

void
kk_summarise(const uint8_t *buf, size_t buflen, uint64_t base, size_t nfunc,
    const uint64_t *start, const uint64_t *limit, uint32_t *out)
{
	uint32_t *col;
	size_t k, ncol;

	ncol = kk_summary_columns();
	for (k = 0; k < nfunc; k++) {
		col = out + k * ncol;
		memset(col, 0, ncol * sizeof(*col));
		if (kk_walk(buf + start[k], buflen - start[k], limit[k],
		    base + start[k], KK_TEXT_NONE, col) != KK_NEXT) {
			memset(col, 0, ncol * sizeof(*col));
			col[KK_COL_N] = KK_DEFERRED;
			continue;
		}
		col[KK_COL_N] = (uint32_t)kk_nrows;
		col[KK_COL_PROLOGUE] = kk_isa_prologue(buf + start[k],
		    buflen - start[k], limit[k], kk_rows, kk_nrows);
	}
}

/*
 * The rows of one function, for Python (a table's records, or one
 * function's probes): 0 with *rows and *nrows set (valid until the next
 * walk), or KK_DEFER / KK_ERROR.  *prologue: the rules it passes.
 */
int
kk_function_rows(const uint8_t *code, size_t len, size_t limit,
    uint64_t address, int text, const struct kk_row **rows, size_t *nrows,
    unsigned *prologue)
{
	int rv;

	rv = kk_walk(code, len, limit, address, text, NULL);
	if (rv != KK_NEXT)
		return (rv);
	*rows = kk_rows;
	*nrows = kk_nrows;
	*prologue = kk_isa_prologue(code, len, limit, kk_rows, kk_nrows);
	return (0);
}

/*
 * One instruction, b[0, len) at address, with capstone's text for it, into
 * *row: KK_NEXT, or KK_ERROR when the rule and capstone disagree.
 */
int
kk_classify(const uint8_t *b, size_t len, uint64_t address,
    const char *mnemonic, const char *operands, struct kk_row *row)
{

	kk_text_reset();
	return (kk_isa_classify(b, len, address, mnemonic, operands, row));
}

/* The prologue rules code[0, limit) passes, its instructions at offs[0, n). */
unsigned
kk_prologue(const uint8_t *code, size_t limit, const uint32_t *offs, size_t n)
{
	struct kk_row *p;
	size_t i, cap;

	if (n > kk_rcap) {
		for (cap = kk_rcap != 0 ? kk_rcap : 4096; cap < n; cap *= 2)
			;
		if ((p = realloc(kk_rows, cap * sizeof(*p))) == NULL)
			return (0);
		kk_rows = p;
		kk_rcap = cap;
	}
	for (i = 0; i < n; i++)
		kk_rows[i].kr_off = offs[i];
	return (kk_isa_prologue(code, limit, limit, kk_rows, n));
}

/* A row's text: 'which' 0 mnemonic, 1 operands; NULL without. */
const char *
kk_row_text(const struct kk_row *row, int which)
{

	return (row->kr_text == KK_NO_TEXT ? NULL : kk_text(row, which));
}

/* What a refused row's reason says (its text's prefix, then the reason), in out[0, cap). */
void
kk_row_reason(const struct kk_row *row, char *out, size_t cap)
{

	snprintf(out, cap, "%s" KK_REASON_JOIN "%s", row->kr_text ==
	    KK_NO_TEXT ? "" : kk_text(row, 2), kk_reason_text(row->kr_reason));
}

/* -- JSON ------------------------------------------------------------ */

struct kk_out {
	char	*p;
	char	*end;
	int	 full;		/* a piece did not fit: all of it is discarded */
	int	 ascii;		/* 0: a string was not ASCII; Python writes it */
};

/* A JSON string, quoted once (kk_words()): the status words and the kinds. */
struct kk_word {
	const char	*kw_s;
	size_t		 kw_n;
};

#define	KK_KINDS	64
static char kk_wbuf[4096];
static struct kk_word kk_wok, kk_wskip, kk_wkindskip, kk_wkinds[KK_KINDS];

/*
 * n bytes of s to o.  A record is many short pieces (keys, numbers, a
 * cached tail): those are copied by fixed-size moves the compiler inlines,
 * which a call to memcpy() for each would cost several times over.
 */
static inline void
kk_put(struct kk_out *o, const char *s, size_t n)
{
	char *p;

	/* Once full, what follows may still fit: the caller discards it all. */
	if ((size_t)(o->end - o->p) < n) {
		o->full = 1;
		return;
	}
	p = o->p;
	o->p += n;
	if (n >= 16 && n <= 32) {
		memcpy(p, s, 16);
		memcpy(p + n - 16, s + n - 16, 16);
	} else if (n >= 8 && n < 16) {
		memcpy(p, s, 8);
		memcpy(p + n - 8, s + n - 8, 8);
	} else if (n >= 4 && n < 8) {
		memcpy(p, s, 4);
		memcpy(p + n - 4, s + n - 4, 4);
	} else if (n < 4) {
		while (n-- > 0)
			*p++ = *s++;
	} else
		memcpy(p, s, n);
}

static void
kk_puts(struct kk_out *o, const char *s)
{

	kk_put(o, s, strlen(s));
}

/*
 * Decimal text of v, as Python's str() writes an int, two digits a step:
 * right-aligned in buf[0, KK_DEC), from the returned index.
 */
#define	KK_DEC	24

static unsigned
kk_utoa(char *buf, unsigned long long v)
{
	static const char pairs[] =
	    "00010203040506070809101112131415161718192021222324252627282930"
	    "31323334353637383940414243444546474849505152535455565758596061"
	    "62636465666768697071727374757677787980818283848586878889909192"
	    "93949596979899";
	unsigned i;

	i = KK_DEC;
	while (v >= 100) {
		i -= 2;
		memcpy(buf + i, pairs + 2 * (v % 100), 2);
		v /= 100;
	}
	if (v >= 10) {
		i -= 2;
		memcpy(buf + i, pairs + 2 * v, 2);
	} else
		buf[--i] = (char)('0' + v);
	return (i);
}

static void
kk_uint(struct kk_out *o, unsigned long long v)
{
	char buf[KK_DEC];
	unsigned i;

	if (v < 10) {		/* most fields of a record */
		buf[0] = (char)('0' + v);
		kk_put(o, buf, 1);
		return;
	}
	i = kk_utoa(buf, v);
	if (i < KK_DEC)		/* always: says so to the compiler */
		kk_put(o, buf + i, KK_DEC - i);
}

/*
 * A number kept as its decimal text, for where each record of a function
 * is: the next record's offset and address are the last ones plus the
 * last instruction's length, a carry or two rather than a whole number
 * written anew.
 */
struct kk_dec {
	char		kd_buf[KK_DEC];
	unsigned	kd_at;		/* its digits: kd_buf[kd_at, KK_DEC) */
};

static void
kk_dec_set(struct kk_dec *d, unsigned long long v)
{

	d->kd_at = kk_utoa(d->kd_buf, v);
}

/* d += n, in decimal (d + n must not pass 2^64 - 1). */
static void
kk_dec_add(struct kk_dec *d, unsigned long long n)
{
	unsigned i, v, carry;

	for (i = KK_DEC, carry = 0; n != 0 || carry != 0; n /= 10) {
		if (--i < d->kd_at) {
			d->kd_buf[i] = '0';
			d->kd_at = i;
		}
		v = (unsigned)(d->kd_buf[i] - '0') + (unsigned)(n % 10) + carry;
		carry = v >= 10;
		d->kd_buf[i] = (char)('0' + (carry ? v - 10 : v));
	}
}

/* Where a record is: its offset in its function and its address. */
struct kk_place {
	struct kk_dec	kp_off;
	struct kk_dec	kp_addr;
};

static void
kk_int(struct kk_out *o, long long v)
{

	if (v < 0) {
		kk_put(o, "-", 1);
		kk_uint(o, 0ull - (unsigned long long)v);
	} else
		kk_uint(o, (unsigned long long)v);
}

/*
 * The end of each function's --summary --json line, from "eligible" on,
 * made of kk_summarise()'s counters: a formatter of counts, no rule.  A
 * function passes when it has the prologue rule bit 'rule_bit', else its
 * reason is 'reason'; 'kinds' are the table kinds' JSON strings and
 * 'order' their indexes in the order a line lists them (Python's, like
 * the quoting).  One line per function, each ended by a newline, empty
 * for a deferred function; *text points at them until the next call.
 * Returns their length, or (size_t)-1 when memory runs out.
 */
static char *kk_tails;
static size_t kk_tcap;

#define	KK_PUTS(o, s)	kk_put((o), (s), sizeof(s) - 1)

size_t
kk_summary_json(const uint32_t *cols, size_t nfunc, unsigned rule_bit,
    const char *reason, const char *const *kinds, const unsigned *order,
    char **text)
{
	struct kk_out o;
	const uint32_t *col;
	size_t k, i, len, most, ncol, cap, rlen, klen[KK_KINDS];
	uint32_t ok, n;
	char *p;
	int any;

	ncol = kk_summary_columns();
	if (kk_v.kv_nkinds > KK_KINDS)
		return ((size_t)-1);
	rlen = strlen(reason);
	most = 160 + rlen;
	for (i = 0; i < kk_v.kv_nkinds; i++) {
		klen[i] = strlen(kinds[i]);
		most += klen[i] + 12;
	}
	len = 0;
	for (k = 0; k < nfunc; k++) {
		col = cols + k * ncol;
		if (len + most > kk_tcap) {
			for (cap = kk_tcap != 0 ? kk_tcap : 1 << 16;
			    cap < len + most; cap *= 2)
				;
			if ((p = realloc(kk_tails, cap)) == NULL)
				return ((size_t)-1);
			kk_tails = p;
			kk_tcap = cap;
		}
		o.p = kk_tails + len;
		o.end = kk_tails + kk_tcap;
		o.full = 0;
		o.ascii = 1;
		n = col[KK_COL_N];
		if (n == KK_DEFERRED) {
			kk_put(&o, "\n", 1);
		} else if ((col[KK_COL_PROLOGUE] & rule_bit) == 0) {
			KK_PUTS(&o, "\"eligible\":false,\"reason\":");
			kk_put(&o, reason, rlen);
			KK_PUTS(&o, ",\"walk_error\":\"\",\"instructions\":");
			kk_uint(&o, n);
			KK_PUTS(&o, ",\"probes\":0,\"skipped\":");
			kk_uint(&o, n);
			KK_PUTS(&o, ",\"kinds\":{}}\n");
		} else {
			for (ok = 0, i = 0; i < kk_v.kv_nkinds; i++)
				ok += col[KK_COL_KIND + i];
			KK_PUTS(&o, "\"eligible\":true,\"reason\":\"\","
			    "\"walk_error\":\"\",\"instructions\":");
			kk_uint(&o, n);
			KK_PUTS(&o, ",\"probes\":");
			kk_uint(&o, ok);
			KK_PUTS(&o, ",\"skipped\":");
			kk_uint(&o, n - ok);
			KK_PUTS(&o, ",\"kinds\":{");
			for (any = 0, i = 0; i < kk_v.kv_nkinds; i++) {
				if (col[KK_COL_KIND + order[i]] == 0)
					continue;
				if (any++)
					kk_put(&o, ",", 1);
				kk_put(&o, kinds[order[i]], klen[order[i]]);
				kk_put(&o, ":", 1);
				kk_uint(&o, col[KK_COL_KIND + order[i]]);
			}
			KK_PUTS(&o, "}}\n");
		}
		len = (size_t)(o.p - kk_tails);
	}
	*text = kk_tails;
	return (len);
}

/* The bytes b[0, n) in hex, as a JSON string (n is at most KK_HEX_MAX). */
#define	KK_HEX_MAX	32

static void
kk_hex(struct kk_out *o, const uint8_t *b, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	char buf[2 * KK_HEX_MAX];
	size_t i;

	if (n > KK_HEX_MAX)
		n = KK_HEX_MAX;
	for (i = 0; i < n; i++) {
		buf[2 * i] = digits[b[i] >> 4];
		buf[2 * i + 1] = digits[b[i] & 15];
	}
	kk_put(o, "\"", 1);
	kk_put(o, buf, 2 * n);	/* apart from the quotes: one inlined copy */
	kk_put(o, "\"", 1);
}

/* The text of s as json.dumps writes it (ensure_ascii), without quotes. */
static void
kk_escape(struct kk_out *o, const char *s)
{
	char buf[8];
	const char *run;
	unsigned char c;

	for (;;) {
		for (run = s; (c = (unsigned char)*s) >= 0x20 && c < 0x80 &&
		    c != '"' && c != '\\'; s++)
			;
		kk_put(o, run, (size_t)(s - run));
		if (c == '\0')
			return;
		if (c >= 0x80) {
			o->ascii = 0;
			return;
		}
		if (c == '"' || c == '\\') {
			buf[0] = '\\';
			buf[1] = (char)c;
			kk_put(o, buf, 2);
		} else {
			switch (c) {
			case '\n': kk_put(o, "\\n", 2); break;
			case '\r': kk_put(o, "\\r", 2); break;
			case '\t': kk_put(o, "\\t", 2); break;
			case '\b': kk_put(o, "\\b", 2); break;
			case '\f': kk_put(o, "\\f", 2); break;
			default:
				snprintf(buf, sizeof(buf), "\\u%04x", c);
				kk_put(o, buf, 6);
			}
		}
		s++;
	}
}

static void
kk_quote(struct kk_out *o, const char *s)
{

	kk_put(o, "\"", 1);
	kk_escape(o, s);
	kk_put(o, "\"", 1);
}

/* s as a JSON string into *w, from the buffer kk_wbuf at *o; 0, or -1 when it does not fit or is not ASCII. */
static int
kk_word(struct kk_out *o, struct kk_word *w, const char *s)
{

	w->kw_s = o->p;
	kk_quote(o, s);
	w->kw_n = (size_t)(o->p - w->kw_s);
	return (o->full || !o->ascii ? -1 : 0);
}

/* The words every record writes, quoted once. */
static int
kk_words(void)
{
	struct kk_out o;
	unsigned i;

	if (kk_v.kv_nkinds > KK_KINDS)
		return (-1);
	o.p = kk_wbuf;
	o.end = kk_wbuf + sizeof(kk_wbuf);
	o.full = 0;
	o.ascii = 1;
	if (kk_word(&o, &kk_wok, kk_v.kv_status_ok) != 0 ||
	    kk_word(&o, &kk_wskip, kk_v.kv_status_skip) != 0 ||
	    kk_word(&o, &kk_wkindskip, kk_v.kv_kind_skip) != 0)
		return (-1);
	for (i = 0; i < kk_v.kv_nkinds; i++)
		if (kk_word(&o, &kk_wkinds[i], kk_v.kv_kinds[i]) != 0)
			return (-1);
	return (0);
}

static inline long long
kk_field_int(const uint8_t *p, uint32_t size, int sign)
{
	unsigned long long v;
	uint32_t v32;
	uint16_t v16;

	/* Fixed-size copies, which the compiler makes loads (little-endian host). */
	switch (size) {
	case 1:
		v = p[0];
		break;
	case 2:
		memcpy(&v16, p, 2);
		v = v16;
		break;
	case 4:
		memcpy(&v32, p, 4);
		v = v32;
		break;
	default:
		v = 0;
		memcpy(&v, p, size < 8 ? size : 8);
	}
	if (sign && size < 8 && (v >> (8 * size - 1)) & 1)
		v |= ~0ull << (8 * size);
	return ((long long)v);
}

/*
 * Fields [first, last) of an instruction's record: its row, at code (its
 * bytes) and at pl (NULL when no field says where it is); a function-wide
 * refusal (refused: the JSON text of its reason) makes every record a
 * refusal.
 */
static void
kk_jwrite(struct kk_out *o, const struct kk_row *row, const uint8_t *code,
    const struct kk_place *pl, const char *refused, unsigned first,
    unsigned last)
{
	const struct kk_jfield *f;
	const struct kk_word *w;
	const uint8_t *p;
	char word[12];
	unsigned i;
	int skip;

	skip = refused != NULL || row->kr_reason != 0;
	for (i = first, f = kk_v.kv_jfields + first; i < last; i++, f++) {
		kk_put(o, f->kj_key, kk_jkeylen[i]);
		switch (f->kj_source) {
		case KK_S_OFFSET:
			kk_put(o, pl->kp_off.kd_buf + pl->kp_off.kd_at,
			    KK_DEC - pl->kp_off.kd_at);
			break;
		case KK_S_ADDRESS:
			kk_put(o, pl->kp_addr.kd_buf + pl->kp_addr.kd_at,
			    KK_DEC - pl->kp_addr.kd_at);
			break;
		case KK_S_LENGTH:
			kk_uint(o, row->kr_len);
			break;
		case KK_S_BYTES:
			kk_hex(o, code, row->kr_len);
			break;
		case KK_S_MNEMONIC:
		case KK_S_OPERANDS:
			kk_quote(o, kk_text(row,
			    f->kj_source == KK_S_MNEMONIC ? 0 : 1));
			break;
		case KK_S_STATUS:
			w = skip ? &kk_wskip : &kk_wok;
			kk_put(o, w->kw_s, w->kw_n);
			break;
		case KK_S_REASON:
			if (refused != NULL)
				kk_puts(o, refused);
			else if (row->kr_reason != 0) {
				kk_put(o, "\"", 1);
				kk_escape(o, kk_text(row, 2));
				kk_puts(o, KK_REASON_JOIN);
				kk_escape(o, kk_reason_text(row->kr_reason));
				kk_put(o, "\"", 1);
			} else
				kk_put(o, "\"\"", 2);
			break;
		case KK_S_KIND:
			w = skip || row->kr_md.km_kind >= kk_v.kv_nkinds ?
			    &kk_wkindskip : &kk_wkinds[row->kr_md.km_kind];
			kk_put(o, w->kw_s, w->kw_n);
			break;
		case KK_S_TARGET:
			if ((row->kr_flags & KK_R_TARGET) != 0)
				kk_uint(o, row->kr_target);
			else
				kk_put(o, "null", 4);
			break;
		case KK_S_NULL:
			kk_put(o, "null", 4);
			break;
		default:
			p = (const uint8_t *)row + f->kj_off;
			switch (f->kj_type) {
			case KK_J_INT:
			case KK_J_SINT:
				kk_int(o, kk_field_int(p, f->kj_size,
				    f->kj_type == KK_J_SINT));
				break;
			case KK_J_HEX:
				kk_hex(o, p, f->kj_size);
				break;
			case KK_J_BOOL:
				kk_puts(o, *p != 0 ? "true" : "false");
				break;
			case KK_J_WORD:
				snprintf(word, sizeof(word), "0x%08llx",
				    (unsigned long long)kk_field_int(p,
				    f->kj_size, 0));
				kk_quote(o, word);
				break;
			default:
				kk_quote(o, *p < kk_v.kv_nclasses ?
				    kk_v.kv_classes[*p] : "");
				break;
			}
		}
	}
}

/*
 * A function's refusal (kv_json: the JSON text of its reason, or NULL
 * when it is not refused).  A refused function's records all say the same
 * verdict, which is written once (kv_n bytes of kv_text; 0: not, when it
 * does not fit) and pasted.
 */
#define	KK_REFUSAL_MAX	512

struct kk_refusal {
	const char	*kv_json;
	size_t		 kv_n;
	char		 kv_text[KK_REFUSAL_MAX];
};

/* The verdict fields of the record of row, in a function refused as rf says. */
static void
kk_verdict(struct kk_out *o, const struct kk_row *row, const uint8_t *code,
    const struct kk_refusal *rf)
{

	if (rf->kv_n != 0)
		kk_put(o, rf->kv_text, rf->kv_n);
	else
		kk_jwrite(o, row, code, NULL, rf->kv_json, kk_jverdict,
		    kk_jrest);
}

/*
 * The fields of a cached row after where it is, as a function that is not
 * refused writes them, written once into its slot (with the closing brace)
 * and pasted from there; in a refused function, the verdict between is
 * the function's.  0 when the slot cannot hold them (the caller writes the
 * record).
 */
static int
kk_cached_record(struct kk_out *o, struct kk_cached *c,
    const struct kk_row *row, const uint8_t *code,
    const struct kk_refusal *rf)
{
	struct kk_out t;

	if (c->kc_jlen == 0) {
		t.p = c->kc_json;
		t.end = c->kc_json + sizeof(c->kc_json);
		t.full = 0;
		t.ascii = 1;
		kk_jwrite(&t, row, code, NULL, NULL, kk_jplace, kk_jverdict);
		c->kc_jverdict = (uint16_t)(t.p - c->kc_json);
		kk_jwrite(&t, row, code, NULL, NULL, kk_jverdict, kk_jrest);
		c->kc_jrest = (uint16_t)(t.p - c->kc_json);
		kk_jwrite(&t, row, code, NULL, NULL, kk_jrest,
		    kk_v.kv_njfields);
		kk_put(&t, "}", 1);
		if (t.full || !t.ascii)
			return (0);
		c->kc_jlen = (uint16_t)(t.p - c->kc_json);
	}
	if (rf->kv_json == NULL) {
		kk_put(o, c->kc_json, c->kc_jlen);
		return (1);
	}
	kk_put(o, c->kc_json, c->kc_jverdict);
	kk_verdict(o, row, code, rf);
	kk_put(o, c->kc_json + c->kc_jrest, c->kc_jlen - c->kc_jrest);
	return (1);
}

/*
 * One instruction's record: its row, at code (its bytes) and pl, in a
 * function refused as rf says.  For a row from the cache, what depends on
 * the bytes alone (all but where it is, and the verdict in a refused
 * function) is written once and kept in the cache's slot.
 */
static void
kk_record(struct kk_out *o, const struct kk_row *row, const uint8_t *code,
    const struct kk_place *pl, const struct kk_refusal *rf)
{
	long i;

	kk_jwrite(o, row, code, pl, NULL, 0, kk_jplace);
	/*
	 * Its slot still holds its bytes: a walk's rows keep their slots
	 * (kc_epoch) until the next walk, and a function is written before.
	 */
	i = (long)row->kr_cache - 1;
	if (i >= 0 && kk_cached_record(o, &kk_cache[i], row, code, rf))
		return;
	kk_jwrite(o, row, code, pl, NULL, kk_jplace, kk_jverdict);
	kk_verdict(o, row, code, rf);
	kk_jwrite(o, row, code, pl, NULL, kk_jrest, kk_v.kv_njfields);
	kk_put(o, "}", 1);
}

/*
 * One function into o: head, the records of its instructions, tail.  Its
 * refusal: excluded (the JSON text of its reason, or NULL), else the
 * prologue rule 'rule' (a bit of kk_isa_prologue()), whose refusal is
 * prologue.  *eligible says which, and picks the head: head_ok or
 * head_refused (either NULL: none).  KK_NEXT, KK_DEFER or KK_ERROR.
 */
static int
kk_function(struct kk_out *o, const uint8_t *code, size_t len, size_t limit,
    uint64_t address, const char *excluded, unsigned rule,
    const char *prologue, const char *head_ok, const char *head_refused,
    const char *tail, int *eligible)
{
	struct kk_refusal rf;
	struct kk_place pl;
	struct kk_out t;
	const char *refused;
	size_t i;
	uint32_t off;
	int rv, wraps;

	if ((rv = kk_walk(code, len, limit, address, KK_TEXT_ALL, NULL)) !=
	    KK_NEXT)
		return (rv);
	refused = excluded;
	if (refused == NULL &&
	    (kk_isa_prologue(code, len, limit, kk_rows, kk_nrows) & rule) == 0)
		refused = prologue;
	*eligible = refused == NULL;
	if (*eligible ? head_ok != NULL : head_refused != NULL)
		kk_puts(o, *eligible ? head_ok : head_refused);
	rf.kv_json = refused;
	rf.kv_n = 0;
	if (refused != NULL && kk_nrows > 0) {
		t.p = rf.kv_text;
		t.end = rf.kv_text + sizeof(rf.kv_text);
		t.full = 0;
		t.ascii = 1;
		kk_jwrite(&t, &kk_rows[0], code, NULL, refused, kk_jverdict,
		    kk_jrest);
		if (!t.full && t.ascii)
			rf.kv_n = (size_t)(t.p - rf.kv_text);
	}
	/* Counted in decimal where no address passes 2^64 - 1. */
	wraps = address + limit < address;
	for (i = 0; i < kk_nrows; i++) {
		off = kk_rows[i].kr_off;
		if (i > 0) {
			kk_put(o, ",", 1);
			kk_dec_add(&pl.kp_off, off - kk_rows[i - 1].kr_off);
			if (wraps)
				kk_dec_set(&pl.kp_addr, address + off);
			else
				kk_dec_add(&pl.kp_addr, off - kk_rows[i - 1].kr_off);
		} else {
			kk_dec_set(&pl.kp_off, off);
			kk_dec_set(&pl.kp_addr, address + off);
		}
		kk_record(o, &kk_rows[i], code + off, &pl, &rf);
	}
	if (tail != NULL)
		kk_puts(o, tail);
	return (o->ascii ? KK_NEXT : KK_DEFER);
}

/*
 * Whole lines, buffered here and written to a file descriptor: a worker's
 * chunk of a kernel's JSON goes from this buffer to the kernel, with no
 * copy through Python objects.
 */
static char *kk_obuf;
static size_t kk_olen, kk_ocap;

#define	KK_FLUSH_AT	(1 << 20)

int
kk_json_flush(int fd)
{
	size_t done;
	ssize_t n;

	if (fd < 0)
		return (0);	/* kept for kk_json_buffer() */
	for (done = 0; done < kk_olen; done += (size_t)n) {
		n = write(fd, kk_obuf + done, kk_olen - done);
		if (n < 0) {
			if (errno == EINTR) {
				n = 0;
				continue;
			}
			return (-1);
		}
	}
	kk_olen = 0;
	return (0);
}

/* What is buffered (for fd -1: all of it), at *p. */
size_t
kk_json_buffer(const char **p)
{

	*p = kk_obuf;
	return (kk_olen);
}

/* Forget what is buffered: the chunk it belonged to failed, or Python took it. */
void
kk_json_discard(void)
{

	kk_olen = 0;
}

static int
kk_grow(size_t need)
{
	char *p;
	size_t cap;

	for (cap = kk_ocap != 0 ? kk_ocap : 2 * KK_FLUSH_AT; cap < need;
	    cap *= 2)
		;
	if (cap == kk_ocap)
		return (0);
	if ((p = realloc(kk_obuf, cap)) == NULL)
		return (-1);
	kk_obuf = p;
	kk_ocap = cap;
	return (0);
}

/* Append n bytes (a line Python wrote) to the buffer; -1 on a write error. */
int
kk_json_put(int fd, const char *s, size_t n)
{

	if (kk_grow(kk_olen + n) != 0)
		return (-1);
	memcpy(kk_obuf + kk_olen, s, n);
	kk_olen += n;
	return (kk_olen >= KK_FLUSH_AT && fd >= 0 ? kk_json_flush(fd) : 0);
}

/*
 * Functions first..n-1 of a chunk, each whole line (head, records, tail)
 * appended to the buffer: function k's bytes are buf[start[k], start[k] +
 * len[k]), limit[k] of them its own, at address[k].  Its line starts with
 * strings + head[k] (up to "eligible":), then head_ok, or the refused
 * head: strings + excl_head[k] for a function excluded by name (whose
 * records say strings + excl_rec[k]; both -1 otherwise), else
 * prologue_head (records: prologue_rec).  rule: the prologue rule's bit.
 * Returns the index of the first function Python must write (n when
 * none), or -1 on a write error.
 */
long
kk_json_emit_many(int fd, const uint8_t *buf, size_t first, size_t n,
    const uint64_t *start, const uint64_t *len, const uint64_t *limit,
    const uint64_t *address, const char *strings, const int64_t *head,
    const int64_t *excl_head, const int64_t *excl_rec, unsigned rule,
    const char *head_ok, const char *prologue_head, const char *prologue_rec)
{
	struct kk_out o;
	const char *excluded, *refused_head;
	size_t k;
	int eligible, rv;

	for (k = first; k < n; k++) {
		if (kk_grow(kk_olen + KK_FLUSH_AT) != 0)
			return (-1);
		excluded = excl_rec[k] >= 0 ? strings + excl_rec[k] : NULL;
		refused_head = excl_head[k] >= 0 ? strings + excl_head[k] :
		    prologue_head;
		for (;;) {
			o.p = kk_obuf + kk_olen;
			o.end = kk_obuf + kk_ocap;
			o.full = 0;
			o.ascii = 1;
			kk_puts(&o, strings + head[k]);
			rv = kk_function(&o, buf + start[k], len[k], limit[k],
			    address[k], excluded, rule, prologue_rec, head_ok,
			    refused_head, "]}\n", &eligible);
			if (!o.full)
				break;
			if (kk_grow(kk_ocap * 2) != 0)
				return (-1);
		}
		if (rv != KK_NEXT)
			return ((long)k);
		kk_olen = (size_t)(o.p - kk_obuf);
		if (kk_olen >= KK_FLUSH_AT && fd >= 0 && kk_json_flush(fd) != 0)
			return (-1);
	}
	return ((long)n);
}
