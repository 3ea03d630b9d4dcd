// SPDX-License-Identifier: MIT
/* C loops a Python test process calls through ctypes (tests/e2e/test_pyrun.py): the calling
 * thread stays in C, outside the eval loop, for the given time. */
#include <stdlib.h>
#include <time.h>

static void *volatile sink[64];

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* malloc and free back to back: the thread is inside the allocator most of the time */
void busy_malloc(double secs)
{
	double end = now() + secs;
	unsigned int i = 0;

	while (now() < end)
		for (int k = 0; k < 1000; k++, i++) {
			free(sink[i & 63]);
			sink[i & 63] = malloc(16 + (i * 37 & 1023));
		}
}

/* pure computation, no call at all */
unsigned long busy_spin(double secs)
{
	double end = now() + secs;
	unsigned long x = 1;

	while (now() < end)
		for (int k = 0; k < 100000; k++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}
