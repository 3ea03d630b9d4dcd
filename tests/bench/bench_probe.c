// SPDX-License-Identifier: MIT
/*
 * bench_probe: attaches one reference program from bench_probes.bpf.c (an empty uprobe, or a step
 * of the tptrace-entry ladder) to one function of a running process, drains the ring like
 * tptrace does, and detaches when stdin closes.
 *
 *   bench_probe --pid P --path LIB --off 0xOFF --entry PROG [--return PROG] [--wake-bytes N]
 *
 * Prints "ATTACHED" once the probes are live; at exit "RECORDS n" and, per program,
 * "STATS <prog> <run_cnt> <run_time_ns>" (non-zero only with kernel.bpf_stats_enabled=1).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "bench_probes.skel.h"

static unsigned long long records;

static int on_record(void *ctx, void *data, size_t size)
{
	records++;
	return 0;
}

static void print_stats(struct bpf_program *prog)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);

	if (!prog || bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len))
		return;
	printf("STATS %s %llu %llu\n", bpf_program__name(prog), (unsigned long long)info.run_cnt,
	       (unsigned long long)info.run_time_ns);
}

int main(int argc, char **argv)
{
	const char *path = NULL, *entry = NULL, *ret_name = NULL;
	struct bpf_program *entry_prog = NULL, *ret_prog = NULL;
	struct bpf_link *links[2] = {};
	struct bench_probes_bpf *skel;
	struct ring_buffer *rb = NULL;
	unsigned long long off = 0, wake_bytes = 0;
	int pid = -1, err = 1;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--pid"))
			pid = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--path"))
			path = argv[i + 1];
		else if (!strcmp(argv[i], "--off"))
			off = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--entry"))
			entry = argv[i + 1];
		else if (!strcmp(argv[i], "--return"))
			ret_name = argv[i + 1];
		else if (!strcmp(argv[i], "--wake-bytes"))
			wake_bytes = strtoull(argv[i + 1], NULL, 0);
	}
	if (pid <= 0 || !path || !off || !entry) {
		fprintf(stderr, "usage: bench_probe --pid P --path LIB --off 0xOFF --entry PROG "
			"[--return PROG] [--wake-bytes N]\n");
		return 2;
	}
	skel = bench_probes_bpf__open();
	if (!skel) {
		fprintf(stderr, "bench_probe: open: %s\n", strerror(errno));
		return 1;
	}
	skel->rodata->wake_threshold = wake_bytes;
	/* load only the programs asked for */
	{
		struct bpf_program *p;

		bpf_object__for_each_program(p, skel->obj) {
			const char *n = bpf_program__name(p);
			bool want = !strcmp(n, entry) || (ret_name && !strcmp(n, ret_name));

			bpf_program__set_autoload(p, want);
			if (!strcmp(n, entry))
				entry_prog = p;
			else if (ret_name && !strcmp(n, ret_name))
				ret_prog = p;
		}
	}
	if (!entry_prog || (ret_name && !ret_prog)) {
		fprintf(stderr, "bench_probe: no program %s\n", entry_prog ? ret_name : entry);
		goto cleanup;
	}
	if (bench_probes_bpf__load(skel)) {
		fprintf(stderr, "bench_probe: load: %s\n", strerror(errno));
		goto cleanup;
	}
	links[0] = bpf_program__attach_uprobe(entry_prog, false, pid, path, off);
	if (!links[0]) {
		fprintf(stderr, "bench_probe: attach %s at %s+0x%llx: %s\n", entry, path, off,
			strerror(errno));
		goto cleanup;
	}
	if (ret_prog) {
		links[1] = bpf_program__attach_uprobe(ret_prog, true, pid, path, off);
		if (!links[1]) {
			fprintf(stderr, "bench_probe: attach return at %s+0x%llx: %s\n", path, off,
				strerror(errno));
			goto cleanup;
		}
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_record, NULL, NULL);
	if (!rb) {
		fprintf(stderr, "bench_probe: ring buffer: %s\n", strerror(errno));
		goto cleanup;
	}
	printf("ATTACHED\n");
	fflush(stdout);
	for (;;) {
		struct pollfd in = { .fd = 0, .events = POLLIN };
		char buf[256];

		ring_buffer__poll(rb, 50);	/* the same 50 ms timeout as tptrace's loop */
		ring_buffer__consume(rb);	/* NO_WAKEUP records never wake the poll */
		if (poll(&in, 1, 0) > 0 && read(0, buf, sizeof(buf)) <= 0)
			break;
	}
	ring_buffer__consume(rb);
	printf("RECORDS %llu\n", records);
	print_stats(entry_prog);
	print_stats(ret_prog);
	err = 0;
cleanup:
	bpf_link__destroy(links[0]);
	bpf_link__destroy(links[1]);
	ring_buffer__free(rb);
	bench_probes_bpf__destroy(skel);
	return err;
}
