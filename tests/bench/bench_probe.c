// SPDX-License-Identifier: MIT
/*
 * bench_probe: loads one BPF object, attaches one of its programs (and optionally a return
 * program) to one function of a running process, drains the object's "events" ring like
 * tptrace does, and detaches when stdin closes. The objects: tests/bench/bench_empty.bpf.c (the
 * empty floor), tptrace's own .output/cuda.bpf.o, and the ladder objects bench.mk cuts from
 * bpf/cuda.bpf.c (TP_BENCH_STOP).
 *
 *   bench_probe --obj FILE --pid P --path LIB --off 0xOFF --entry PROG [--return PROG]
 *               [--api SYMBOL [--caller2] | --cookie N] [--ring-mb N] [--wake-bytes N]
 *               [--record-ns N]
 *
 * --api gives the program the attach cookie tptrace itself computes for that CUDA runtime
 * symbol (user/core/cuda_api.c). --ring-mb and --wake-bytes set the ring's size and the
 * wakeup_bytes constant where the object has them; the defaults are tptrace's (4 MiB, an
 * eighth of the ring: user/core/session.c). --record-ns spins that long per record in the reader,
 * as tptrace's decoding does: a reader that keeps up record by record keeps writing the
 * ring's consumer position, which the producing CPU then reads back.
 * Prints "ATTACHED" once the probes are live; at exit "RECORDS n" and, per program,
 * "STATS <prog> <run_cnt> <run_time_ns>" (non-zero only with kernel.bpf_stats_enabled=1).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "cuda_api.h"

static unsigned long long records, record_ns;

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static int on_record(void *ctx, void *data, size_t size)
{
	records++;
	if (record_ns) {
		unsigned long long end = mono_ns() + record_ns;

		while (mono_ns() < end)
			;
	}
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

/* Sets the u64 `const volatile` variable name in the object's .rodata before load, as a
 * skeleton's rodata->name would. Returns -ENOENT when the object has no such variable. */
static int set_rodata_u64(struct bpf_object *obj, const char *name, __u64 val)
{
	struct btf *btf = bpf_object__btf(obj);
	const struct btf_var_secinfo *vs;
	const struct btf_type *sec;
	struct bpf_map *map;
	const void *init;
	size_t size;
	int id;

	if (!btf)
		return -ENOENT;
	id = btf__find_by_name_kind(btf, ".rodata", BTF_KIND_DATASEC);
	if (id < 0)
		return -ENOENT;
	sec = btf__type_by_id(btf, id);
	bpf_object__for_each_map(map, obj) {
		if (bpf_map__is_internal(map) && strstr(bpf_map__name(map), ".rodata"))
			break;
	}
	if (!map || !(init = bpf_map__initial_value(map, &size)))
		return -ENOENT;
	vs = btf_var_secinfos(sec);
	for (int i = 0; i < btf_vlen(sec); i++, vs++) {
		const struct btf_type *var = btf__type_by_id(btf, vs->type);
		char *copy;
		int r;

		if (strcmp(btf__name_by_offset(btf, var->name_off), name))
			continue;
		if (vs->size != sizeof(val) || vs->offset + sizeof(val) > size)
			return -EINVAL;
		copy = malloc(size);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, init, size);
		memcpy(copy + vs->offset, &val, sizeof(val));
		r = bpf_map__set_initial_value(map, copy, size);
		free(copy);
		return r;
	}
	return -ENOENT;
}

static int api_cookie(const char *symbol, bool caller2, unsigned long long *cookie)
{
	for (int id = 0; id < cuda_api_count; id++) {
		if (!strcmp(cuda_apis[id].symbol, symbol)) {
			*cookie = cuda_api_cookie(id, caller2);
			return 0;
		}
	}
	return -ENOENT;
}

int main(int argc, char **argv)
{
	const char *obj_path = NULL, *path = NULL, *entry = NULL, *ret_name = NULL, *api = NULL;
	struct bpf_program *entry_prog = NULL, *ret_prog = NULL, *p;
	unsigned long long off = 0, cookie = 0, ring_mb = 4, wake_bytes = 0;
	struct bpf_link *links[2] = {};
	struct ring_buffer *rb = NULL;
	struct bpf_object *obj;
	struct bpf_map *events;
	bool caller2 = false, wake_given = false;
	int pid = -1, err = 1, r;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--caller2")) {
			caller2 = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "bench_probe: %s needs a value\n", argv[i]);
			return 2;
		}
		if (!strcmp(argv[i], "--obj"))
			obj_path = v;
		else if (!strcmp(argv[i], "--pid"))
			pid = atoi(v);
		else if (!strcmp(argv[i], "--path"))
			path = v;
		else if (!strcmp(argv[i], "--off"))
			off = strtoull(v, NULL, 0);
		else if (!strcmp(argv[i], "--entry"))
			entry = v;
		else if (!strcmp(argv[i], "--return"))
			ret_name = v;
		else if (!strcmp(argv[i], "--api"))
			api = v;
		else if (!strcmp(argv[i], "--cookie"))
			cookie = strtoull(v, NULL, 0);
		else if (!strcmp(argv[i], "--ring-mb"))
			ring_mb = strtoull(v, NULL, 0);
		else if (!strcmp(argv[i], "--record-ns"))
			record_ns = strtoull(v, NULL, 0);
		else if (!strcmp(argv[i], "--wake-bytes")) {
			wake_bytes = strtoull(v, NULL, 0);
			wake_given = true;
		}
		else {
			fprintf(stderr, "bench_probe: unknown option %s\n", argv[i]);
			return 2;
		}
		i++;
	}
	if (!obj_path || pid <= 0 || !path || !off || !entry || !ring_mb) {
		fprintf(stderr, "usage: bench_probe --obj FILE --pid P --path LIB --off 0xOFF --entry PROG "
			"[--return PROG] [--api SYMBOL [--caller2] | --cookie N] [--ring-mb N] "
			"[--wake-bytes N] [--record-ns N]\n");
		return 2;
	}
	if (api && api_cookie(api, caller2, &cookie)) {
		fprintf(stderr, "bench_probe: %s is not a CUDA runtime API tptrace probes\n", api);
		return 2;
	}
	if (!wake_given)
		wake_bytes = (ring_mb << 20) / 8;
	obj = bpf_object__open_file(obj_path, NULL);
	if (!obj) {
		fprintf(stderr, "bench_probe: open %s: %s\n", obj_path, strerror(errno));
		return 1;
	}
	/* load only the programs asked for: the object's others need attach types of their own */
	bpf_object__for_each_program(p, obj) {
		const char *n = bpf_program__name(p);

		bpf_program__set_autoload(p, !strcmp(n, entry) || (ret_name && !strcmp(n, ret_name)));
		if (!strcmp(n, entry))
			entry_prog = p;
		else if (ret_name && !strcmp(n, ret_name))
			ret_prog = p;
	}
	if (!entry_prog || (ret_name && !ret_prog)) {
		fprintf(stderr, "bench_probe: %s has no program %s\n", obj_path,
			entry_prog ? ret_name : entry);
		goto cleanup;
	}
	events = bpf_object__find_map_by_name(obj, "events");
	if (events && bpf_map__set_max_entries(events, (__u32)(ring_mb << 20))) {
		fprintf(stderr, "bench_probe: ring of %llu MiB refused\n", ring_mb);
		goto cleanup;
	}
	r = set_rodata_u64(obj, "wakeup_bytes", wake_bytes);
	if (r && r != -ENOENT) {
		fprintf(stderr, "bench_probe: wakeup_bytes: %s\n", strerror(-r));
		goto cleanup;
	}
	if (bpf_object__load(obj)) {
		fprintf(stderr, "bench_probe: load %s: %s\n", obj_path, strerror(errno));
		goto cleanup;
	}
	{
		LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = cookie);

		links[0] = bpf_program__attach_uprobe_opts(entry_prog, pid, path, off, &opts);
	}
	if (!links[0]) {
		fprintf(stderr, "bench_probe: attach %s at %s+0x%llx: %s\n", entry, path, off,
			strerror(errno));
		goto cleanup;
	}
	if (ret_prog) {
		LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = true, .bpf_cookie = cookie);

		links[1] = bpf_program__attach_uprobe_opts(ret_prog, pid, path, off, &opts);
		if (!links[1]) {
			fprintf(stderr, "bench_probe: attach return at %s+0x%llx: %s\n", path, off,
				strerror(errno));
			goto cleanup;
		}
	}
	if (events) {
		rb = ring_buffer__new(bpf_map__fd(events), on_record, NULL, NULL);
		if (!rb) {
			fprintf(stderr, "bench_probe: ring buffer: %s\n", strerror(errno));
			goto cleanup;
		}
	}
	printf("ATTACHED\n");
	fflush(stdout);
	for (;;) {
		struct pollfd in = { .fd = 0, .events = POLLIN };
		char buf[256];

		if (rb) {
			ring_buffer__poll(rb, 20);	/* the same 20 ms timeout as tptrace's loop */
			ring_buffer__consume(rb);	/* NO_WAKEUP records never wake the poll */
		}
		if (poll(&in, 1, rb ? 0 : 50) > 0 && read(0, buf, sizeof(buf)) <= 0)
			break;
	}
	if (rb)
		ring_buffer__consume(rb);
	printf("RECORDS %llu\n", records);
	print_stats(entry_prog);
	print_stats(ret_prog);
	err = 0;
cleanup:
	bpf_link__destroy(links[0]);
	bpf_link__destroy(links[1]);
	ring_buffer__free(rb);
	bpf_object__close(obj);
	return err;
}
