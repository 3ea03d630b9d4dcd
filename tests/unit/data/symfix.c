// SPDX-License-Identifier: MIT
/* Fixture for test_elfsym: symbols of every binding and kind elfsym keeps or drops.
 * Built with symfix2.c as a non-PIE executable (ET_EXEC) and as a versioned shared object
 * (ET_DYN). */
#include <stddef.h>
#include <sys/sdt.h>

int symfix_global_counter = 1;			/* global OBJECT */
static int symfix_static_table[4] = { 1, 2, 3, 4 };	/* local OBJECT */

/* local FUNC, kept out of line so it has its own symbol and size */
__attribute__((noinline)) static int symfix_static_fn(int x)
{
	return x * 3 + symfix_static_table[x & 3];
}

/* the function-local static becomes a local OBJECT "symfix_local_counter.<n>" */
int symfix_bump(void)
{
	static int symfix_local_counter;

	return ++symfix_local_counter + symfix_static_fn(symfix_local_counter);
}

/* STT_GNU_IFUNC: kept as a FUNC. Its local resolver shares the address and sorts first by
 * name, so func_at() must pick the global on purpose. */
static int symfix_impl(void) { return 7; }
static int (*symfix_choose_impl(void))(void) { return symfix_impl; }
int symfix_ifunc(void) __attribute__((ifunc("symfix_choose_impl")));

/* symfix2.c, linked first, has a local symfix_dup at a lower address: find_func() prefers
 * this global one. Both files have a local symfix_twin: find_func() takes the lower one. */
__attribute__((noinline)) int symfix_dup(int x)
{
	return x - 1;
}

__attribute__((noinline)) static int symfix_twin(int x)
{
	return x * 5;
}

int symfix_use_twin(int x)
{
	return symfix_twin(x) + symfix_dup(x);
}

/* USDT probes: .note.stapsdt with two providers, one of them twice */
int symfix_probed(int x)
{
	STAP_PROBE1(tpfix, enter, x);
	STAP_PROBE1(tpfix, leave, x);
	STAP_PROBE1(tpfix_other, mark, x);
	return x;
}

#ifdef SYMFIX_SHARED
/* two versions of one name: .symtab spells them symfix_versioned@VER_1 and @@VER_2 */
int symfix_versioned_v1(void) { return 1; }
int symfix_versioned_v2(void) { return 2; }
__asm__(".symver symfix_versioned_v1, symfix_versioned@VER_1");
__asm__(".symver symfix_versioned_v2, symfix_versioned@@VER_2");
#else
int main(void)
{
	return symfix_bump() + symfix_ifunc() + symfix_global_counter == 0;
}
#endif
