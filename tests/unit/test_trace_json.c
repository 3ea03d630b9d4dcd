// SPDX-License-Identifier: MIT
/*
 * The trace writer's .gz output: the same calls written to FILE.json and FILE.json.gz give
 * the same bytes once gunzipped, over many chunks (more than the workers have slots in
 * flight), strings longer than the writer's buffer, strings that need escaping and an empty
 * trace; the .gz is one gzip member whose CRC and size check (zlib's inflate verifies both).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "check.h"
#include "trace_json.h"

#define slurp check_slurp

/* Inflates one gzip member; *rest: compressed bytes left after it (0 for a single member). */
static char *gunzip(const char *gz, size_t len, size_t *out_len, size_t *rest)
{
	z_stream z = { 0 };
	size_t cap = 1 << 20, n = 0;
	char *out = malloc(cap);
	int rc = Z_OK;

	if (!out || inflateInit2(&z, 31) != Z_OK)
		return NULL;
	z.next_in = (Bytef *)gz;
	z.avail_in = len;
	while (rc == Z_OK) {
		if (n == cap) {
			char *o = realloc(out, cap *= 2);

			if (!o)
				break;
			out = o;
		}
		z.next_out = (Bytef *)out + n;
		z.avail_out = cap - n;
		rc = inflate(&z, Z_NO_FLUSH);
		n = cap - z.avail_out;
	}
	*rest = z.avail_in;
	inflateEnd(&z);
	if (rc != Z_STREAM_END) {	/* bad data, bad CRC or bad length: all Z_DATA_ERROR */
		free(out);
		return NULL;
	}
	*out_len = n;
	return out;
}

static void write_trace(const char *path, long events, const char *big)
{
	struct trace_json *tj = trace_json__open(path);

	CHECK(tj != NULL, "open %s", path);
	if (!tj)
		return;
	trace_json__begin(tj, 1000, 1700000000000000000ULL);
	trace_json__process_name(tj, 7, "proc \"seven\"\t\\");
	for (long i = 0; i < events; i++) {
		trace_json__event(tj, "X", "cuda_runtime", i % 3 ? "cudaLaunchKernel" : "cudaMemcpyAsync",
				  7, 8 + i % 5, 1000 + i * 1733, 600 + i % 977);
		trace_json__arg_u64(tj, "correlation", i);
		trace_json__arg_hex(tj, "func", 0x55550000a000ULL + (i * 2654435761ULL) % 65536);
		trace_json__arg_dim3(tj, "grid", i % 64, 2, 1);
		trace_json__arg_i64(tj, "rc", -(i % 7));
		trace_json__arg_str(tj, "kernel", i % 11 ? "void gemm<float, 128>(float*)" : "we\"ird\n");
		if (big && i == events / 2)
			trace_json__field_raw(tj, "big", big);
		trace_json__event_end(tj);
	}
	trace_json__end_events(tj);
	trace_json__top_raw(tj, "meta", "{\"x\": 1}");
	CHECK(trace_json__close(tj) == 0, "close %s", path);
}

static void same(const char *dir, const char *name, long events, const char *big)
{
	char plain[256], gz[256];
	size_t plen = 0, glen = 0, ulen = 0, rest = 1;
	char *p, *g, *u;

	snprintf(plain, sizeof(plain), "%s/%s.json", dir, name);
	snprintf(gz, sizeof(gz), "%s/%s.json.gz", dir, name);
	write_trace(plain, events, big);
	write_trace(gz, events, big);
	p = slurp(plain, &plen);
	g = slurp(gz, &glen);
	CHECK(p && g && plen > 0, "%s: read back", name);
	if (!p || !g)
		goto out;
	u = gunzip(g, glen, &ulen, &rest);
	CHECK(u != NULL, "%s: the .gz inflates, CRC and size right", name);
	CHECK(rest == 0, "%s: one gzip member, nothing after it (%zu bytes left)", name, rest);
	CHECK(u && ulen == plen && !memcmp(u, p, plen),
	      "%s: gunzipped .gz == plain (%zu vs %zu bytes)", name, ulen, plen);
	if (big)
		CHECK(u && memmem(u, ulen, big, strlen(big)) != NULL,
		      "%s: the string longer than the buffer is there whole", name);
	CHECK(glen < plen / 2 || plen < 4096, "%s: compressed (%zu of %zu bytes)", name, glen, plen);
	free(u);
out:
	free(p);
	free(g);
	unlink(plain);
	unlink(gz);
}

int main(void)
{
	char dir[] = "/tmp/tptrace-tjtest.XXXXXX";
	size_t big_len = 5 << 20;	/* over the writer's 2 MiB buffer */
	char *big = malloc(big_len + 3);

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	if (!big)
		return 1;
	/* a JSON string of incompressible-ish text: a long run the writer must pass through */
	big[0] = '"';
	for (size_t i = 1; i <= big_len; i++)
		big[i] = 'a' + (i * 2654435761u >> 13) % 26;
	big[big_len + 1] = '"';
	big[big_len + 2] = '\0';

	same(dir, "empty", 0, NULL);
	same(dir, "small", 10, NULL);
	/* ~230 bytes an event: 200k events are ~45 MiB, dozens of 1 MiB chunks */
	same(dir, "many", 200000, NULL);
	same(dir, "big", 30000, big);
	free(big);
	rmdir(dir);
	return check_done();
}
