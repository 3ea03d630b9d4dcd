// SPDX-License-Identifier: MIT
/* Per-pid recorder claims (fr_claim.h). The claim is a listening unix socket in the abstract
 * namespace named after the process (pid and start time, so a reused pid is a new name): no
 * file to plant or leave behind, and the kernel drops the name the moment the recorder dies,
 * even by SIGKILL. A second recorder's bind fails with EADDRINUSE; it then connects to learn
 * who holds the name (SO_PEERCRED). Any user can bind an abstract name, so a holder that is
 * not root is no recorder: said once, and the pid is recorded anyway. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "fr_claim.h"
#include "log.h"

#define MAX_CLAIMS 4096
#define MAX_TOLD 256

static struct {
	int pid, fd;
} claims[MAX_CLAIMS];
static int nr_claims;
static int told[MAX_TOLD], nr_told;

/* "starttime" of /proc/PID/stat (field 22), 0 unknown */
static unsigned long long start_time(int pid)
{
	char path[64], buf[1024], *p;
	unsigned long long st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	/* after "comm)": state is field 3, starttime field 22 */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d"
			     " %*d %*d %*d %llu", &st) != 1)
		return 0;
	return st;
}

static socklen_t claim_addr(int pid, struct sockaddr_un *sa)
{
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	/* sun_path[0] = '\0': the abstract namespace */
	n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "tptrace-fr.%d.%llu", pid,
		     start_time(pid));
	return offsetof(struct sockaddr_un, sun_path) + 1 + n;
}

static bool tell_once(int pid)
{
	for (int i = 0; i < nr_told; i++)
		if (told[i] == pid)
			return false;
	told[nr_told++ % MAX_TOLD] = pid;
	if (nr_told > MAX_TOLD)
		nr_told = MAX_TOLD;
	return true;
}

int fr_claim__pid(int pid, int *owner, bool *first)
{
	struct sockaddr_un sa;
	struct ucred cred = {};
	socklen_t len = claim_addr(pid, &sa), clen = sizeof(cred);
	int fd, err;

	*owner = 0;
	*first = false;
	/* ours already: the process exec'd and its new image is recorded again */
	for (int i = 0; i < nr_claims; i++)
		if (claims[i].pid == pid)
			return 0;
	if (nr_claims == MAX_CLAIMS)
		return -ENOSPC;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (!bind(fd, (struct sockaddr *)&sa, len) && !listen(fd, 1)) {
		claims[nr_claims].pid = pid;
		claims[nr_claims++].fd = fd;
		return 0;
	}
	err = errno;
	close(fd);
	if (err != EADDRINUSE)
		return -err;
	/* who holds it */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && !connect(fd, (struct sockaddr *)&sa, len) &&
	    !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) && cred.uid != 0) {
		if (tell_once(pid))
			log_error("pid %d: the recorder claim is held by pid %d of uid %u, not a recorder: recording anyway\n",
				  pid, (int)cred.pid, (unsigned)cred.uid);
		close(fd);
		return -EPERM;
	}
	if (fd >= 0)
		close(fd);
	*owner = cred.pid;
	*first = tell_once(pid);
	return -EBUSY;
}

void fr_claim__release(int pid)
{
	for (int i = 0; i < nr_claims; i++) {
		if (claims[i].pid == pid) {
			close(claims[i].fd);
			claims[i] = claims[--nr_claims];
			return;
		}
	}
}
