// SPDX-License-Identifier: MIT
/* Tier 1: --py-stacks in the flight recorder. Synthetic NCCL records carry stack ids; a fake
 * ustack_lookup_fn stands in for the BPF stack map; the dump's entries must carry PyTorch FR
 * "frames" (innermost first) resolved when the entry was recorded, frames [] plus a reason for
 * entries without a stack, and the dump's py_stacks metadata. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "api_id.h"
#include "check.h"
#include "json_file.h"
#include "cuda.h"
#include "flightrec.h"
#include "session.h"
#include "core_sinks.h"
#include "fr_records.h"
#include "target.h"
#include "ustack.h"

static int pid;
static uint64_t ts = 1000000;

/* The fake stack map: id 100 = train.py's all_reduce call site, id 200 = a frame whose code
 * object was freed; "forget" models the id leaving the BPF map after the entry was recorded. */
static struct ustack_frame site_a[] = {
	{ .func = "all_reduce", .file = "/opt/torch/distributed/c10d.py", .line = 2501 },
	{ .func = "Trainer.step", .file = "/job/train.py", .line = 42 },
	{ .func = "<module>", .file = "/job/train.py", .line = 90 },
};
static struct ustack_frame site_b[] = {
	{ .unresolved = true, .code = 0x7f00dead0000 },
	{ .func = "main", .file = "/job/train.py", .line = 7 },
};
static struct ustack stacks[] = {
	{ .id = 100, .nr_py = 3, .py = site_a },
	{ .id = 200, .nr_py = 2, .py = site_b },
	{ .id = 300, .nr_py = 0, .flags = TP_USTACK_PY_NOSTATE },
};
static bool forget;
static int lookups;

static const struct ustack *fake_lookup(void *ctx, int p, uint64_t id)
{
	CHECK(ctx == &stacks, "lookup gets its ctx");
	CHECK(p == pid, "lookup for the recorded pid");
	lookups++;
	for (size_t i = 0; !forget && i < sizeof(stacks) / sizeof(stacks[0]); i++)
		if (stacks[i].id == id)
			return &stacks[i];
	return NULL;
}

static void coll(struct flightrec *fr, const char *sym, uint64_t comm, uint64_t ustack)
{
	/* ncclAllReduce(send, recv, 1024, float32, sum, comm, stream 0x5100) */
	fr_rec_call(fr, pid, pid, &ts, sym, (uint64_t[6]){ 0x1000, 0x2000, 1024, 7, 0, comm },
		    0x5100, 0, NULL, 0, ustack);
	fr_rec_ret(fr, pid, pid, &ts, sym, 0, false, 0);
}

static cJSON *get(cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *str(cJSON *o, const char *k)
{
	cJSON *v = get(o, k);

	return cJSON_IsString(v) ? v->valuestring : "(not a string)";
}

static cJSON *dump(struct flightrec *fr, const char *dir, const char *host)
{
	char path[512];

	CHECK(flightrec__dump_all(fr, "request") == 1, "one dump");
	flightrec__dump_path(path, sizeof(path), dir, host, pid);
	return check_load_json(path);
}

static void check_frame(cJSON *f, const char *name, const char *file, int line)
{
	if (name) {
		CHECK_STR(str(f, "name"), name);
		CHECK_STR(str(f, "filename"), file);
		CHECK(cJSON_IsNumber(get(f, "line")) && get(f, "line")->valueint == line,
		      "line %d", line);
	} else {
		CHECK(cJSON_IsNull(get(f, "name")) && cJSON_IsNull(get(f, "filename")) &&
		      cJSON_IsNull(get(f, "line")), "unresolved frame: nulls, never a guess");
	}
	CHECK(cJSON_GetArraySize(f) == 3, "PyTorch's three keys only");
}

int main(void)
{
	char dir[] = "/tmp/tptrace-frpy.XXXXXX", host[256] = "";
	struct flightrec_opts fo = { .ring_size = 16, .ustack_lookup = fake_lookup,
				     .ustack_ctx = &stacks };
	struct flightrec *fr;
	struct target *t;
	cJSON *d, *entries, *e, *fa, *py;
	const uint64_t comm = 0xc0ffee00;

	pid = getpid();
	gethostname(host, sizeof(host) - 1);
	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	fo.dump_dir = dir;
	fo.no_stacks = true;
	fr = test_fr_new(&fo);
	t = target__new(pid);
	CHECK(fr && t, "new");
	CHECK(flightrec__add_process(fr, t) == 0, "add");
	flightrec__set_python(fr, pid, "3.11.2", NULL);

	coll(fr, "ncclAllReduce", comm, 100);
	coll(fr, "ncclAllReduce", comm, 100);		/* the same site: resolved once */
	coll(fr, "ncclAllReduce", comm, 200);
	coll(fr, "ncclAllReduce", comm, TP_USTACK_NOPY);
	coll(fr, "ncclAllReduce", comm, 300);
	coll(fr, "ncclAllReduce", comm, 999);		/* not in the map */
	coll(fr, "ncclAllReduce", comm, TP_USTACK_NONE);	/* the process was not set up */
	CHECK(lookups == 4, "one lookup per distinct stored id (got %d)", lookups);
	/* the map loses every id now: the entries keep what was resolved at record time */
	forget = true;

	d = dump(fr, dir, host);
	if (!d)
		return check_done();
	py = get(d, "py_stacks");
	CHECK_STR(str(py, "python"), "3.11.2");
	CHECK(cJSON_IsNull(get(py, "why_no_frames")), "frames captured: no why");
	CHECK(cJSON_GetArraySize(get(d, "entries")) == 7, "7 entries");
	entries = get(d, "entries");

	for (int i = 0; i < 2; i++) {
		e = cJSON_GetArrayItem(entries, i);
		fa = get(e, "frames");
		CHECK(cJSON_GetArraySize(fa) == 3, "entry %d: 3 frames", i);
		check_frame(cJSON_GetArrayItem(fa, 0), "all_reduce", "/opt/torch/distributed/c10d.py",
			    2501);
		check_frame(cJSON_GetArrayItem(fa, 1), "Trainer.step", "/job/train.py", 42);
		check_frame(cJSON_GetArrayItem(fa, 2), "<module>", "/job/train.py", 90);
		CHECK(!get(e, "frames_missing"), "frames present: no reason");
	}
	e = cJSON_GetArrayItem(entries, 2);
	fa = get(e, "frames");
	CHECK(cJSON_GetArraySize(fa) == 2, "freed code object: still 2 frames");
	check_frame(cJSON_GetArrayItem(fa, 0), NULL, NULL, 0);
	check_frame(cJSON_GetArrayItem(fa, 1), "main", "/job/train.py", 7);

	e = cJSON_GetArrayItem(entries, 3);
	CHECK(cJSON_IsArray(get(e, "frames")) && !cJSON_GetArraySize(get(e, "frames")), "[] for NOPY");
	CHECK_STR(str(e, "frames_missing"), "no Python thread state on the calling thread");
	e = cJSON_GetArrayItem(entries, 4);
	CHECK(cJSON_GetArraySize(get(e, "frames")) == 0, "[] for a stack without Python frames");
	CHECK_STR(str(e, "frames_missing"), "no Python thread state on the calling thread");
	e = cJSON_GetArrayItem(entries, 5);
	CHECK(cJSON_GetArraySize(get(e, "frames")) == 0, "[] for an id not in the map");
	CHECK_STR(str(e, "frames_missing"), "stack id not in the BPF stack map");
	e = cJSON_GetArrayItem(entries, 6);
	CHECK(cJSON_GetArraySize(get(e, "frames")) == 0, "[] for TP_USTACK_NONE");
	CHECK_STR(str(e, "frames_missing"),
		  "not captured (the process was not set up for Python stacks)");
	cJSON_Delete(d);

	/* a process without a readable Python: the dump says why */
	flightrec__set_python(fr, pid, NULL, "Python 3.8.18: unsupported (3.9-3.13)");
	d = dump(fr, dir, host);
	py = get(d, "py_stacks");
	CHECK(cJSON_IsNull(get(py, "python")), "no version");
	CHECK_STR(str(py, "why_no_frames"), "Python 3.8.18: unsupported (3.9-3.13)");
	cJSON_Delete(d);
	test_fr_free(fr);

	/* --py-stacks off: no frames key, py_stacks null (dumps as before) */
	fo.ustack_lookup = NULL;
	fr = test_fr_new(&fo);
	CHECK(fr && flightrec__add_process(fr, t) == 0, "add again");
	coll(fr, "ncclAllReduce", comm, 100);
	d = dump(fr, dir, host);
	CHECK(cJSON_IsNull(get(d, "py_stacks")), "py_stacks null when off");
	e = cJSON_GetArrayItem(get(d, "entries"), 0);
	CHECK(e && !get(e, "frames") && !get(e, "frames_missing"), "no frames when off");
	cJSON_Delete(d);
	test_fr_free(fr);
	target__free(t);
	{
		char cmd[600];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		system(cmd);
	}
	return check_done();
}
