// SPDX-License-Identifier: MIT
/* Test driver for `tptrace mem` (user/mem_main.c) until user/tptrace.c dispatches to it:
 * the same code from libtptrace.a, under its own name. */
int mem_main(int argc, char **argv);

int main(int argc, char **argv)
{
	return mem_main(argc, argv);
}
