// SPDX-License-Identifier: MIT
/* A libcuda.so.1 whose load never finishes (its constructor sleeps), for the snapshot tests:
 * a static-cudart nvcc program run with this directory first in LD_LIBRARY_PATH stays inside
 * its first CUDA runtime call (cudart's lazy init dlopens libcuda.so.1), so the snapshot sees
 * a real static cudart entry point (cuda* in the executable) on the stack. */
#include <time.h>

__attribute__((constructor)) static void never_loads(void)
{
	struct timespec ts = { 600, 0 };

	nanosleep(&ts, NULL);
}
