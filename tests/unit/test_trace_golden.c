// SPDX-License-Identifier: MIT
/*
 * The JSON backend writes what the writer wrote before it became an interface: the same calls
 * give byte-identical files. tests/unit/golden/trace_writer.json is the output of the writer
 * at commit 03a373c (trace_json.c before issue 25's split) for write_small() below; for the
 * large trace (4 MiB of JSON: several gzip chunks, compressed on worker threads) the golden
 * values are the CRC-32 and length of that writer's .json and .json.gz files. The program
 * builds against both versions (the old one had no slice_begin: there the Python frame is
 * written whole with "X", as the decoder did).
 *   test_trace_golden            check against the golden files
 *   test_trace_golden --print    print the large trace's CRCs and lengths (to make them)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "check.h"
#include "trace_json.h"

#define BASE 5000000000ull

/* the large trace's files as the old writer wrote them */
#define OLD_JSON_CRC 0x502161b0u
#define OLD_JSON_LEN 3958507u
#define OLD_GZ_CRC 0x2f8a934u
#define OLD_GZ_LEN 345539u

static void write_events(struct trace_json *tj, int n)
{
	char big[3000];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	trace_json__begin(tj, BASE, 1700000000123456789ull);
	trace_json__process_name(tj, 42, "python3 \"train\"");
	trace_json__process_label(tj, 42, "rank 3");
	trace_json__process_sort(tj, 42, -1);
	trace_json__thread_name(tj, 42, 43, "worker\t1");
	trace_json__thread_sort(tj, 42, 43, 7);
	for (int i = 0; i < n; i++) {
		uint64_t t = BASE + 1000 + (uint64_t)i * 1234;

		trace_json__event(tj, "X", "cuda_runtime", "cudaLaunchKernel", 42, 43, t, 567 + i % 7);
		trace_json__arg_str(tj, "kernel", i % 5 ? "gemm<float, 128>" : "relu\n\"x\"");
		trace_json__arg_u64(tj, "correlation", 100 + i);
		trace_json__arg_i64(tj, "rc", -(i % 3));
		trace_json__arg_f64(tj, "GB/s", i / 7.0);
		trace_json__arg_bool(tj, "per-thread stream", i & 1);
		trace_json__arg_hex(tj, "func", 0xdeadbeef00ull + i);
		trace_json__arg_dim3(tj, "grid", 64, i % 3, 1);
		trace_json__arg_raw(tj, "stack", "[\"a.py:1 f\", \"b.py:2 g\"]");
		if (i % 1000 == 999)
			trace_json__arg_str(tj, "long", big);
		trace_json__event_end(tj);
		if (i % 10 == 0) {
			trace_json__event(tj, "s", "ac2g", "ac2g", 42, 43, t, 0);
			trace_json__field_raw(tj, "id", "7");
			trace_json__event_end(tj);
			trace_json__event(tj, "f", "ac2g", "ac2g", 1, 9, t + 50, 0);
			trace_json__field_raw(tj, "id", "7");
			trace_json__field_raw(tj, "bp", "\"e\"");
			trace_json__event_end(tj);
			trace_json__event(tj, "C", "cuda_memory", "bytes allocated (cuda:0)", 42, 0, t, 0);
			trace_json__arg_u64(tj, "bytes", 4096ull * i);
			trace_json__event_end(tj);
			trace_json__event(tj, "i", "cuda_memory", "OOM", 42, 43, t + 1, 0);
			trace_json__field_raw(tj, "s", "\"p\"");
			trace_json__arg_str(tj, "api", "cudaMalloc");
			trace_json__event_end(tj);
		}
		if (i % 100 == 0) {
			/* a Python frame around a call, as decode.c writes --py-stacks' frames */
#ifdef TPTRACE_TRACE_WRITER_H
			trace_writer__slice_begin(tj, "python_function", "train.py(3): step", 42, 43, t);
			trace_json__event(tj, "E", "python_function", "train.py(3): step", 42, 43, t, 900);
#else
			trace_json__event(tj, "X", "python_function", "train.py(3): step", 42, 43, t, 900);
#endif
			trace_json__arg_u64(tj, "Python id", i);
			trace_json__event_end(tj);
		}
	}
	trace_json__end_events(tj);
	trace_json__top_raw(tj, "tptrace", "{\"version\": \"x\"}");
}

static int write_file(const char *path, int n)
{
	struct trace_json *tj = trace_json__open(path);

	if (!tj)
		return -1;
	write_events(tj, n);
	return trace_json__close(tj);
}

static unsigned char *slurp(const char *path, size_t *len)
{
	return (unsigned char *)check_slurp(path, len);
}

static void crc_of(const char *path, uLong *crc, size_t *len)
{
	unsigned char *b = slurp(path, len);

	*crc = b ? crc32(crc32(0, NULL, 0), b, *len) : 0;
	free(b);
}

int main(int argc, char **argv)
{
	char small[512], large[512], large_gz[512], golden[512];
	unsigned char *a, *b;
	size_t alen, blen, len;
	uLong crc;

	unsetenv("TPTRACE_TRACE_TEE");
	snprintf(small, sizeof(small), "%s/golden_small.json", UNIT_OUT_DIR);
	snprintf(large, sizeof(large), "%s/golden_large.json", UNIT_OUT_DIR);
	snprintf(large_gz, sizeof(large_gz), "%s/golden_large.json.gz", UNIT_OUT_DIR);
	CHECK(write_file(small, 120) == 0, "write %s", small);
	CHECK(write_file(large, 12000) == 0, "write %s", large);
	CHECK(write_file(large_gz, 12000) == 0, "write %s", large_gz);
	if (argc > 1 && !strcmp(argv[1], "--print")) {
		crc_of(large, &crc, &len);
		printf("#define OLD_JSON_CRC 0x%lxu\n#define OLD_JSON_LEN %zuu\n", crc, len);
		crc_of(large_gz, &crc, &len);
		printf("#define OLD_GZ_CRC 0x%lxu\n#define OLD_GZ_LEN %zuu\n", crc, len);
		return 0;
	}
	snprintf(golden, sizeof(golden), "%s/trace_writer_golden.json", UNIT_DATA_DIR);
	a = slurp(golden, &alen);
	b = slurp(small, &blen);
	CHECK(a && b && alen == blen && !memcmp(a, b, alen),
	      "%s: the same bytes as %s (%zu and %zu bytes)", small, golden, blen, alen);
	free(a);
	free(b);
	crc_of(large, &crc, &len);
	CHECK(crc == OLD_JSON_CRC && len == OLD_JSON_LEN, "large .json: crc %lx len %zu", crc, len);
	crc_of(large_gz, &crc, &len);
	CHECK(crc == OLD_GZ_CRC && len == OLD_GZ_LEN, "large .json.gz: crc %lx len %zu", crc, len);
	return check_done();
}
