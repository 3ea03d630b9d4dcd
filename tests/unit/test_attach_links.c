// SPDX-License-Identifier: MIT
/* The links of many owners removed together (user/core/attach.h): probe_links__move appends
 * every uprobe_multi link fd of one owner to another's, in order, and empties the first;
 * probe_links__destroy then closes every one of them (they are removed in parallel, sharing
 * grace periods: tests/bench/fleet_attach.py measures that) and empties its links. Plain fds
 * stand in for link fds: closing is all the teardown does with them. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include "attach.h"
#include "check.h"

static int add(struct probe_links *l, int n, int *out)
{
	l->fds = realloc(l->fds, (l->nr_fds + n) * sizeof(*l->fds));
	if (!l->fds)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

		if (fd < 0)
			return -errno;
		l->fds[l->nr_fds++] = fd;
		out[i] = fd;
	}
	return 0;
}

static bool is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static void test_move_then_destroy(void)
{
	struct probe_links a = {}, b = {}, c = {}, none = {};
	int fa[3], fb[70], fc[1], n = 0;

	CHECK(!add(&a, 3, fa) && !add(&b, 70, fb) && !add(&c, 1, fc), "opening /dev/null");
	CHECK(probe_links__move(&a, &none) == 0 && a.nr_fds == 3, "moving nothing: %d fds",
	      a.nr_fds);
	CHECK(probe_links__move(&a, &b) == 0, "move b");
	CHECK(probe_links__move(&a, &c) == 0, "move c");
	CHECK(b.nr_fds == 0 && !b.fds && c.nr_fds == 0 && !c.fds, "moved owners emptied: %d %d",
	      b.nr_fds, c.nr_fds);
	CHECK(a.nr_fds == 74, "74 fds, got %d", a.nr_fds);
	for (int i = 0; i < 3 && a.nr_fds == 74; i++)
		CHECK(a.fds[i] == fa[i], "fd %d kept in place", i);
	for (int i = 0; i < 70 && a.nr_fds == 74; i++)
		CHECK(a.fds[3 + i] == fb[i], "b's fd %d appended in order", i);
	CHECK(a.nr_fds == 74 && a.fds[73] == fc[0], "c's fd last");
	/* more fds than removal threads (64): every one closed, none twice */
	probe_links__destroy(&a);
	CHECK(a.nr_fds == 0 && !a.fds && a.nr_links == 0, "destroyed links emptied");
	for (int i = 0; i < 3; i++)
		n += is_open(fa[i]);
	for (int i = 0; i < 70; i++)
		n += is_open(fb[i]);
	n += is_open(fc[0]);
	CHECK(n == 0, "%d of 74 fds still open after probe_links__destroy", n);
	probe_links__destroy(&b);	/* empty: nothing to do */
	probe_links__destroy(NULL);
}

static void test_destroy_one(void)
{
	struct probe_links a = {};
	int fa[1];

	CHECK(!add(&a, 1, fa), "opening /dev/null");
	probe_links__destroy(&a);
	CHECK(!is_open(fa[0]), "the one fd closed");
}

int main(void)
{
	test_move_then_destroy();
	test_destroy_one();
	return check_done();
}
