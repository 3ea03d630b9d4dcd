/* SPDX-License-Identifier: MIT */
/* One flight recorder per process: a recorder claims each pid before it attaches, so a
 * second recorder (a second daemon, a hand-run `tptrace fr -p`) says so in one line instead
 * of double-recording it silently. */
#ifndef TPTRACE_FR_CLAIM_H
#define TPTRACE_FR_CLAIM_H

#include <stdbool.h>

/* 0: pid is ours now (until fr_claim__release or our exit). -EBUSY: another recorder holds
 * it; *owner is that recorder's pid (0 unknown) and *first is true the first time pid is
 * refused (say it once). Other -errno: no claim possible; record anyway. */
int fr_claim__pid(int pid, int *owner, bool *first);
void fr_claim__release(int pid);

#endif
