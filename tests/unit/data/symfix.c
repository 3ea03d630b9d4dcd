// SPDX-License-Identifier: MIT
/* Fixture for test_elfsym: symbols of every binding and kind elfsym keeps or drops.
 * Built as a non-PIE executable (ET_EXEC) and as a versioned shared object (ET_DYN). */
#include <stddef.h>

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

/* STT_GNU_IFUNC: kept as a FUNC */
static int symfix_impl(void) { return 7; }
static int (*symfix_resolver(void))(void) { return symfix_impl; }
int symfix_ifunc(void) __attribute__((ifunc("symfix_resolver")));

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
