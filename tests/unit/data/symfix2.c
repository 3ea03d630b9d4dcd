// SPDX-License-Identifier: MIT
/* Second file of the symfix fixture: locals whose names symfix.c also uses. Linked first. */
__attribute__((noinline)) static int symfix_dup(int x)
{
	return x + 1;
}

__attribute__((noinline)) static int symfix_twin(int x)
{
	return x * 7;
}

int symfix2_use(int x)
{
	return symfix_dup(x) + symfix_twin(x);
}

/* A FUNC inside a FUNC, as hand-written assembly has: func_at() on the inner one's bytes
 * names the inner one, the nearest start, though the global outer one also covers them. */
__asm__(".text\n"
	".globl symfix_outer\n"
	".type symfix_outer, @function\n"
	"symfix_outer:\n"
	"	nop\n"
	"	nop\n"
	".type symfix_inner, @function\n"
	"symfix_inner:\n"
	"	nop\n"
	"	ret\n"
	".size symfix_inner, 2\n"
	".size symfix_outer, 4\n");
