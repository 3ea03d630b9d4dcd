/* SPDX-License-Identifier: MIT */
/* fr_parse: read one tptrace flight-recorder dump (docs/fr-schema.md) into a compact form.
 *
 * A job of 16k ranks × 2000 entries is tens of GB of JSON, so this is a hand-written pull
 * parser over the file bytes: no tree, one compact record per entry, buffers reused from one
 * dump to the next. Every read is bounds-checked (it is fuzzed by tests/tools/fr_fuzz.c); fields
 * parsed before an error stay filled so a truncated dump can still be named.
 */
#ifndef TPTRACE_FR_PARSE_H
#define TPTRACE_FR_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "unknown" for every integer field: JSON null, absent, or not a number */
#define FR_UNK INT64_MIN

#define FR_ID_LEN   104	/* comm_id: 16 hex digits, or "local:<host>:<pid>:<handle>" for a comm
			 * created before tptrace attached; longer ids are truncated */
#define FR_NAME_LEN 64

enum fr_op {
	FR_OP_UNKNOWN, FR_OP_ALL_REDUCE, FR_OP_ALL_GATHER, FR_OP_REDUCE_SCATTER, FR_OP_BROADCAST,
	FR_OP_REDUCE, FR_OP_ALL_TO_ALL, FR_OP_GATHER, FR_OP_SCATTER, FR_OP_SEND, FR_OP_RECV,
	FR_OP_COMM_INIT,	/* a communicator init that failed: no collective, never aligned */
	FR_OP_OTHER, FR_OP__COUNT
};
enum fr_dtype {
	FR_DT_UNKNOWN, FR_DT_INT8, FR_DT_UINT8, FR_DT_INT32, FR_DT_UINT32, FR_DT_INT64,
	FR_DT_UINT64, FR_DT_FLOAT16, FR_DT_FLOAT32, FR_DT_FLOAT64, FR_DT_BFLOAT16,
	FR_DT_FLOAT8E4M3, FR_DT_FLOAT8E5M2, FR_DT_OTHER, FR_DT__COUNT
};
enum fr_redop {
	FR_RED_NONE, FR_RED_SUM, FR_RED_PROD, FR_RED_MAX, FR_RED_MIN, FR_RED_AVG,
	FR_RED_PREMUL_SUM, FR_RED_DYNAMIC, FR_RED_OTHER, FR_RED__COUNT
};
enum fr_state { FR_ST_UNKNOWN, FR_ST_ENQUEUED, FR_ST_STARTED, FR_ST_COMPLETED, FR_ST_FAILED };
enum fr_proc_state { FR_PROC_UNKNOWN, FR_PROC_RUNNING, FR_PROC_EXITED, FR_PROC_KILLED };

const char *fr_op_name(int op);
const char *fr_dtype_name(int dtype);
const char *fr_redop_name(int redop);
const char *fr_state_name(int state);
bool fr_op_is_p2p(int op);
bool fr_op_has_redop(int op);
bool fr_op_has_root(int op);

/* One ring entry, reduced to what the analysis compares. */
struct fr_entry {
	int64_t record_id;
	int64_t coll_seq;	/* collective_seq_id, FR_UNK if absent */
	int64_t p2p_seq;
	int64_t count;		/* NCCL count argument (elements) */
	int64_t in_size;	/* elements: sum over input_sizes of the product of dims */
	int64_t out_size;
	int64_t created_ns;	/* time_created_ns */
	int64_t completed_ns;	/* time_discovered_completed_ns, FR_UNK if absent */
	int32_t root;		/* -1 when none/unknown */
	int32_t peer;
	uint32_t pystack;	/* "frames" (--py-stacks): index + 1 in fr_dump.pystacks; 0 none.
				 * fr_analysis re-numbers it into its own table when folding */
	uint16_t comm;		/* index into fr_dump.comms */
	uint8_t op, dtype, redop, state;
};

/* An entry's Python frames ("frames", PyTorch FR's {name, filename, line}, innermost first):
 * the innermost FR_ENTRY_FRAMES are kept, once per distinct stack of a dump (entries of one
 * call site share it). */
#define FR_ENTRY_FRAMES		8
#define FR_MAX_PYSTACKS		4096	/* distinct stacks kept per dump; more: entries without */
struct fr_pyframe {
	int32_t line;		/* 0 unknown */
	char name[FR_NAME_LEN * 2];	/* "" unknown (an unresolved frame: null in the dump) */
	char file[FR_NAME_LEN * 3];
};
struct fr_pystack {
	uint64_t hash;		/* of the kept frames */
	uint32_t first;		/* in fr_dump.pyframes */
	uint8_t nr;
	bool more;		/* the entry had more than FR_ENTRY_FRAMES */
};

struct fr_comm_info {
	char id[FR_ID_LEN];
	char state[16];
	int64_t rank, nranks;
	int64_t last_enqueued, last_started, last_completed, last_p2p;
	int64_t async_error;
	char parent[FR_ID_LEN];	/* comm_id of the parent (split/shrink), "" if none */
	int64_t split_color, split_key;	/* FR_UNK unless ncclCommSplit made it */
	bool in_header;		/* false: only seen in entries/in_call */
	bool local_id;		/* cross_rank_id false / "local:" id: same comm differs per rank */
	bool seq_attach;	/* learned.seq_origin "attach": seqs count from attach, not init */
	char created_by[48];	/* the API that made it ("ncclCommInitRank", ...), "" if absent */
	int64_t init_rc;	/* "state": "init_failed": the ncclResult_t it failed with */
};

struct fr_in_call {
	char api[48];
	char thread_name[32];
	char comm_id[FR_ID_LEN];
	int64_t tid, entered_ns, seq;
	int64_t dropped_since;	/* events its recorder dropped since it entered; 0 none */
};

/* Stacks (version 2, docs/fr-schema.md "Stacks"): per snapshot, what the rules need of each
 * thread and the top frames of the issuing thread; everything else is skipped unread. */
#define FR_STACK_FRAMES		16	/* frames kept of the issuing thread, innermost first */
#define FR_MAX_SNAPSHOTS	8	/* per dump; more are skipped */
#define FR_MAX_THREADS		1024	/* kept per snapshot; more are counted, not kept */
#define FR_FUNC_LEN		128
#define FR_PATH_LEN		160

enum fr_taken { FR_TAKEN_OTHER, FR_TAKEN_ATTACH, FR_TAKEN_DUMP, FR_TAKEN_REQUEST };
/* the order of user/stacks/stacks.h's enum stack_where */
enum fr_where {
	FR_WHERE_UNKNOWN, FR_WHERE_NCCL, FR_WHERE_CUDA, FR_WHERE_DRIVER, FR_WHERE_ALLOCATOR,
	FR_WHERE_PYTHON, FR_WHERE_IDLE, FR_WHERE_RUNNING, FR_WHERE__COUNT
};
enum fr_progress { FR_PROG_UNKNOWN, FR_PROG_NONE, FR_PROG_YES };
enum fr_frame_kind { FR_FRAME_UNKNOWN, FR_FRAME_NATIVE, FR_FRAME_PYTHON };

const char *fr_where_name(int where);
/* inside an NCCL, CUDA runtime or driver call: the waits a hang leaves threads in */
bool fr_where_is_wait(int where);

struct fr_frame {
	uint8_t kind;		/* enum fr_frame_kind */
	int32_t line;		/* Python; 0 unknown */
	int64_t module_off;	/* native; FR_UNK unknown */
	char func[FR_FUNC_LEN];	/* "" unknown (no symbol: never invented) */
	char file[FR_PATH_LEN];	/* Python co_filename */
	char module[FR_PATH_LEN];	/* native module path */
	bool unrecoverable;	/* native: a return address a uretprobe trampoline had replaced
				 * and nothing gave back (module and func empty) */
};

struct fr_stack_thread {
	int64_t tid;
	char name[16];
	char state;		/* 0 unknown */
	uint8_t where, progress;	/* enum fr_where, enum fr_progress */
	bool main, issuing, python;
	char api[48];
};

struct fr_snapshot {
	uint8_t taken;		/* enum fr_taken */
	int64_t time_ns, samples, interval_ms;
	bool exited;
	char ptrace_error[96];	/* "" none */
	char python[16];	/* "" no CPython */
	size_t first_thread, nr_threads;	/* in fr_dump.threads */
	int64_t nr_threads_all;	/* threads in the dump (more than kept when > FR_MAX_THREADS) */
	int64_t issuing;	/* index in fr_dump.threads of the issuing thread, -1 none */
	struct fr_frame frames[FR_STACK_FRAMES];	/* the issuing thread's */
	int nr_frames;
	bool more_frames;	/* it has more than FR_STACK_FRAMES */
};

/* "net" (docs/fr-schema.md "Network"): the process's TCP connections. Addresses are kept as
 * IPv6 (IPv4 mapped, ::ffff:a.b.c.d) so both families compare alike. */
#define FR_MAX_NET_SOCKS	4096	/* kept per dump; more are left out (net_truncated) */
#define FR_MAX_HOST_ADDRS	16
enum fr_net_src { FR_NET_ABSENT, FR_NET_UNKNOWN, FR_NET_INET_DIAG, FR_NET_PROC };
enum fr_net_timer { FR_TIMER_OTHER, FR_TIMER_RETRANSMIT, FR_TIMER_PROBE };
struct fr_net_sock {
	uint8_t local[16], remote[16];
	uint16_t lport, rport;
	bool established;
	uint8_t timer;		/* FR_TIMER_* of "timer" */
	int64_t tx_queue, unacked, retransmits, probes, backoff, last_ack_ms;	/* FR_UNK: unknown */
};

struct fr_dump {
	char schema[16];
	char host[FR_NAME_LEN];
	char dump_reason[16];
	int64_t version, pid, global_rank, world_size, local_rank;
	int64_t dump_time_ns;
	int64_t dump_mono_ns;	/* CLOCK_MONOTONIC at the dump: dump_time_ns - this is the boot */
	int proc_state;		/* enum fr_proc_state */
	int64_t exit_code, signal;
	int64_t ring_size, entries_recorded, entries_overwritten, events_dropped;

	struct fr_comm_info *comms;
	size_t nr_comms, cap_comms;
	struct fr_in_call *in_calls;
	size_t nr_in_calls, cap_in_calls;
	struct fr_entry *entries;
	size_t nr_entries, cap_entries;
	/* version 2: snapshots in dump order (oldest first) and their threads */
	struct fr_snapshot *snaps;
	size_t nr_snaps, cap_snaps;
	struct fr_stack_thread *threads;
	size_t nr_threads, cap_threads;
	char stacks_error[96];	/* why the dump holds no snapshot of its own; "" none */
	bool stacks_pending;	/* a state-first file: its stacks were still being taken */
	/* entries' Python frames (--py-stacks dumps, PyTorch dumps with stack traces) */
	struct fr_pystack *pystacks;
	size_t nr_pystacks, cap_pystacks;
	struct fr_pyframe *pyframes;
	size_t nr_pyframes, cap_pyframes;
	struct fr_pyframe py_scratch[FR_ENTRY_FRAMES];
	int64_t pystacks_dropped;	/* entries whose frames were not kept (over FR_MAX_PYSTACKS) */
	bool py_stacks;		/* recorded with --py-stacks ("py_stacks" not null) */
	char py_python[16];	/* its Python version, "" none */
	char py_why[128];	/* why its entries carry no Python frames, "" captured */
	/* the cross-host trigger this dump answered ("trigger"); trigger_id "" when none */
	char trigger_id[40], trigger_origin[FR_NAME_LEN], trigger_reason[16];
	int64_t trigger_time_ns;

	/* "net": FR_NET_ABSENT (an older dump), FR_NET_UNKNOWN (net_error says why) or where the
	 * sockets were read from */
	int net_source;
	char net_error[96];
	uint8_t host_addrs[FR_MAX_HOST_ADDRS][16];
	int nr_host_addrs;
	uint8_t down_addrs[FR_MAX_HOST_ADDRS][16];	/* of "interfaces" not running (no carrier, or down) */
	int nr_down_addrs;
	struct fr_net_sock *socks;
	size_t nr_socks, cap_socks;
	bool net_truncated;

	char nccl_version[24];	/* "" unknown */
	/* a PyTorch flight-recorder dump (tools/fr/fr_torch.c, docs/fr-torch.md): schema
	 * "pytorch-fr", its format version ("2.10") here; no host, pid or dump time */
	bool torch;
	char torch_version[16];

	char err[160];		/* why fr_dump__parse failed */
};

/* "10.0.0.1" or "fe80::1" (no port): IPv6 or IPv4 mapped into out; false when not one */
bool fr_net_addr(const char *s, uint8_t out[16]);
/* out (INET6_ADDRSTRLEN) from a kept address: "10.0.0.1" for a mapped IPv4 one */
void fr_net_addr_str(const uint8_t a[16], char *out, size_t size);

/* Limits that keep a hostile or broken dump from taking the machine. */
#define FR_MAX_COMMS_PER_DUMP	4096
#define FR_MAX_IN_CALLS		64
#define FR_MAX_ENTRIES		(1 << 22)
#define FR_MAX_NRANKS		(1 << 22)

void fr_dump__init(struct fr_dump *d);
/* Parses buf[0..len) into d (its arrays are reused). 0 on success, -EINVAL (d->err says why)
 * or -ENOMEM. */
int fr_dump__parse(struct fr_dump *d, const char *buf, size_t len);
/* Tail mode, in two calls. fr_dump__parse_head parses buf[0..len) (the start of a file) up to
 * the "entries" array: returns 0 with *entries_off = offset of the first byte after its '[',
 * 1 when buf ends before that (read more), or an error as fr_dump__parse. Then
 * fr_dump__parse_tail parses tail[0..len) (the file from file_off to its end): it skips to
 * the first entry boundary ('{"record_id":'), reads the entries and the rest of the dump, and
 * keeps only the newest keep_last entries. 0, 1 when no entry boundary was found (read from
 * further back), or an error. The header fields of the first call stay. */
int fr_dump__parse_head(struct fr_dump *d, const char *buf, size_t len, size_t *entries_off);
int fr_dump__parse_tail(struct fr_dump *d, const char *tail, size_t len, size_t file_off,
			size_t keep_last);
void fr_dump__release(struct fr_dump *d);

/* For readers of other formats (fr_torch.c): empty d as a parse would before filling it; the
 * comm of that id (created when absent): its index, or -ENOMEM/-E2BIG; one entry more
 * (e->comm set by the caller; count derived from in_size as the JSON reader does): 0,
 * -ENOMEM or -E2BIG; an op from its name ("all_reduce"), FR_OP_OTHER when none matches. */
void fr_dump__reset(struct fr_dump *d);
int fr_dump__comm(struct fr_dump *d, const char *id);
int fr_dump__add_entry(struct fr_dump *d, struct fr_entry *e);
int fr_op_from_name(const char *s, size_t len);
/* The frames in d->py_scratch[0..nr) as a stack of d (an existing equal one, or a new one):
 * its index + 1 for fr_entry.pystack, 0 when nr is 0 or over FR_MAX_PYSTACKS, -ENOMEM. */
int64_t fr_dump__pystack(struct fr_dump *d, int nr, bool more);

#endif
