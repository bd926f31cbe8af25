/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kk_host.h: the analysis's walk over an image's functions, on the host.
 *
 * One shared library per ISA (generator/isa/host.py builds it): the ISA's
 * portable core (sys/modules/kinst/<arch>/kinst_core.c, whose
 * kinst_core_dissect() is the one implementation of kinst's rule for an
 * instruction), the ISA's step (generator/isa/<arch>/accel/kk_walk.c:
 * where the next instruction ends, capstone's text for it, the checks
 * that need that text, the prologue rule) and this generic part
 * (kk_host.c): a function becomes one struct kk_row per instruction, and
 * what the analysis prints is made from rows -- counts for a summary, the
 * JSON records of every instruction, rows handed to Python for a table.
 * Nothing here knows an ISA's rule; what it formats comes from Python as
 * data (kk_init()), and the row layout is told to Python (kk_layout()).
 */

#ifndef KK_HOST_H
#define	KK_HOST_H

#include <stddef.h>
#include <stdint.h>

#include <capstone/capstone.h>

#include "kinst_core.h"

/* One instruction of a function, as the walk found and classified it. */
struct kk_row {
	uint64_t	kr_target;	/* a direct branch's target (KK_R_TARGET) */
	uint32_t	kr_off;		/* from the function's start */
	uint32_t	kr_text;	/* its text in the arena, or KK_NO_TEXT */
	uint32_t	kr_cache;	/* 1 + its slot in the cache (kk_cache_get()) */
	uint8_t		kr_len;
	uint8_t		kr_reason;	/* 0, or why it is refused: kk_init()'s */
	uint8_t		kr_flags;	/* KK_R_* */
	uint8_t		kr_class;	/* the ISA's class of it, for its JSON */
	struct kinst_md	kr_md;		/* kinst_core_dissect()'s metadata */
};

#define	KK_R_TARGET	0x01	/* kr_target is set */
#define	KK_R_CACHEABLE	0x02	/* nothing in it depends on its address */

#define	KK_NO_TEXT	0xffffffffu

/* A function the compiler must not inline (a step's rare path). */
#ifdef __GNUC__
#define	KK_NOINLINE	__attribute__((__noinline__))
#else
#define	KK_NOINLINE
#endif

/*
 * What the walk and the ISA's step call of each other, which Python never
 * does: kept out of the library's exported symbols, so that a call is
 * direct rather than through the procedure linkage table.
 */
#ifdef __GNUC__
#define	KK_INTERNAL	__attribute__((__visibility__("hidden")))
#else
#define	KK_INTERNAL
#endif

/* What a step or a walk says. */
#define	KK_NEXT		0	/* one more row */
#define	KK_DEFER	1	/* Python must do this function */
#define	KK_ERROR	2	/* the rule and capstone disagree: Python says how */

/* How much text a walk keeps. */
#define	KK_TEXT_NONE	0
#define	KK_TEXT_REFUSED	1	/* of refused instructions: their reasons */
#define	KK_TEXT_ALL	2

/*
 * The ISA's vocabulary, from Python's facts (hostcore.py fills one
 * ctypes.Structure of it): everything the walk prints or looks up by name.
 */
struct kk_jfield;		/* a field of the JSON record (kk_host.c) */

struct kk_vocab {
	size_t		kv_size;	/* sizeof(struct kk_vocab), checked */
	const char *const *kv_reasons;	/* by reason code, 0 unused */
	unsigned	kv_nreasons;
	const char *const *kv_names;	/* mnemonics refused by name, sorted */
	const uint8_t	*kv_name_codes;	/* their reason codes */
	unsigned	kv_nnames;
	const char *const *kv_kinds;	/* JSON text of each table kind */
	unsigned	kv_nkinds;
	const char *const *kv_classes;	/* JSON text of each kr_class */
	unsigned	kv_nclasses;
	const char	*kv_status_ok;	/* the record's status and kind words */
	const char	*kv_status_skip;
	const char	*kv_kind_skip;
	const struct kk_jfield *kv_jfields; /* the JSON record, in order */
	unsigned	kv_njfields;
	const char	*kv_capstone;	/* libcapstone, loaded on first need */
};

/* What kk_init() says besides 0. */
#define	KK_INIT_LAYOUT		1	/* another struct, or too big */

int	kk_init(const struct kk_vocab *);

/* A field of struct kk_row, for Python (kk_layout()). */
struct kk_field {
	const char	*kf_name;
	uint32_t	kf_off;
	uint32_t	kf_size;
	uint32_t	kf_signed;
};

#define	KK_FIELD(f, s)	{ #f, (uint32_t)offsetof(struct kk_row, f),	\
	(uint32_t)sizeof(((struct kk_row *)0)->f), (s) }

/*
 * The generic part, for the ISA's step: a row's text (capstone's mnemonic
 * and operands, and what a refusal's reason starts with) in the arena,
 * the mnemonics refused by name (kk_init()), and the rows of instructions
 * already classified, by their bytes.
 */
KK_INTERNAL uint32_t kk_text_add(const char *, const char *, const char *);
KK_INTERNAL unsigned kk_name_reason(const char *);
KK_INTERNAL int kk_cache_get(const uint8_t *, size_t, int, struct kk_row *);
KK_INTERNAL void kk_cache_add(const uint8_t *, size_t, struct kk_row *);
KK_INTERNAL const cs_insn *kk_decode(const uint8_t *, size_t, size_t,
	    uint64_t);
KK_INTERNAL int kk_decoded_row(const uint8_t *, size_t, size_t, uint64_t,
	    int, int, const char *, const char *, struct kk_row *);


/*
 * The function a walk is in, for the ISA's step: one pointer rather than
 * five arguments, which kept the step's registers busy (and saved and
 * restored on every instruction).
 */
struct kk_fn {
	const uint8_t	*kn_code;	/* its bytes, then its section's */
	size_t		kn_len;		/* of kn_code */
	size_t		kn_limit;	/* its own bytes end here */
	uint64_t	kn_address;	/* of kn_code[0] */
	int		kn_text;	/* KK_TEXT_* */
};

/*
 * capstone's entry points, bound from kv_capstone the first time a walk
 * needs capstone (kk_decode()).  The tables alone walk most code, and a
 * process that never meets an encoding they do not know never loads it:
 * 9.6 MB, 2 ms of a summary's start-up.
 */
struct kk_capstone {
	cs_err	(*kcs_open)(cs_arch, cs_mode, csh *);
	cs_err	(*kcs_option)(csh, cs_opt_type, size_t);
	cs_insn	*(*kcs_malloc)(csh);
	bool	(*kcs_disasm_iter)(csh, const uint8_t **, size_t *, uint64_t *,
		    cs_insn *);
};

/*
 * The ISA's step (<arch>/accel/kk_walk.c): opening capstone for it; the
 * instruction at offset off of a function into *row, with or without text:
 * KK_NEXT, KK_DEFER or KK_ERROR; one instruction with capstone's text for
 * it; the prologue rules a function (code[0, len), its own bytes ending at
 * limit) of n rows passes, bit i the ISA's rule i (Isa.prologue_reasons,
 * in order).
 */
KK_INTERNAL int kk_isa_open(const struct kk_capstone *, csh *);
KK_INTERNAL int kk_isa_step(const struct kk_fn *, size_t, struct kk_row *);
KK_INTERNAL int kk_isa_classify(const uint8_t *, size_t, uint64_t,
	    const char *, const char *, struct kk_row *);
KK_INTERNAL unsigned kk_isa_prologue(const uint8_t *, size_t, size_t,
	    const struct kk_row *, size_t);

#endif
