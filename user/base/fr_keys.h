// SPDX-License-Identifier: MIT
/* fr_keys: the key names of a flight-recorder dump (docs/fr-schema.md), one table for the
 * writer (user/fr/flightrec_dump.c, flightrec_stacks.c; the snapshots in "stacks" by
 * user/stacks/stacks_class.c, which `tptrace stacks --json` writes too), the generator of test and benchmark
 * dumps (tests/tools/fr_gen.c) and the parser (tools/fr/fr_parse.c), so the three cannot
 * drift apart. Each is a string literal: it concatenates into format strings and sizeof gives
 * its length. A key used by several objects (state, name, comm_id) is listed once, under the
 * object it first appears in. Renaming one changes the schema: bump FR_SCHEMA_VERSION.
 */
#ifndef TPTRACE_FR_KEYS_H
#define TPTRACE_FR_KEYS_H

/* the top-level object */
#define FRK_SCHEMA			"schema"
#define FRK_VERSION			"version"
#define FRK_HOST			"host"
#define FRK_PID				"pid"
#define FRK_COMM			"comm"
#define FRK_CMDLINE			"cmdline"
#define FRK_GLOBAL_RANK			"global_rank"
#define FRK_WORLD_SIZE			"world_size"
#define FRK_LOCAL_RANK			"local_rank"
#define FRK_NCCL_VERSION		"nccl_version"
#define FRK_NCCL_LIBRARY		"nccl_library"
#define FRK_DUMP_REASON			"dump_reason"
#define FRK_JOB				"job"
#define FRK_TRIGGER			"trigger"
#define FRK_DUMP_TIME_NS		"dump_time_ns"
#define FRK_DUMP_MONO_NS		"dump_mono_ns"
#define FRK_DUMP_SET			"dump_set"
#define FRK_PROCESS			"process"
#define FRK_PROBES_LATE			"probes_late"
#define FRK_PY_STACKS			"py_stacks"
#define FRK_RING_SIZE			"ring_size"
#define FRK_ENTRIES_RECORDED		"entries_recorded"
#define FRK_ENTRIES_OVERWRITTEN		"entries_overwritten"
#define FRK_EVENTS_DROPPED		"events_dropped"
#define FRK_EVENTS_DROPPED_UNKNOWN	"events_dropped_unknown"
#define FRK_RECORDS			"records"
#define FRK_COMMS			"comms"
#define FRK_IN_CALL			"in_call"
#define FRK_STACKS			"stacks"
#define FRK_STACKS_ERROR		"stacks_error"
#define FRK_STACKS_PENDING		"stacks_pending"
#define FRK_STATE_WRITTEN_NS		"state_written_ns"
#define FRK_ENTRIES			"entries"
#define FRK_NET				"net"

/* "trigger" (and "dump_set"'s id) */
#define FRK_ID				"id"
#define FRK_ORIGIN_HOST			"origin_host"
#define FRK_REASON			"reason"
#define FRK_TIME_NS			"time_ns"

/* "dump_set" */
#define FRK_INDEX			"index"
#define FRK_COUNT			"count"		/* and an entry's element count */
#define FRK_CAPTURED_NS			"captured_ns"
#define FRK_CAPTURED_MONO_NS		"captured_mono_ns"
#define FRK_CAPTURE_SPREAD_NS		"capture_spread_ns"
#define FRK_RING_DRAINED		"ring_drained"

/* "process" */
#define FRK_STATE			"state"		/* also comms, entries, threads */
#define FRK_EXIT_CODE			"exit_code"
#define FRK_SIGNAL			"signal"
#define FRK_REPLACED_BY_EXEC		"replaced_by_exec"

/* "probes_late" elements */
#define FRK_LIBRARY			"library"
#define FRK_MAPPED_NS			"mapped_ns"
#define FRK_ATTACHED_NS			"attached_ns"
#define FRK_UNRECORDED_MS		"unrecorded_ms"
#define FRK_NOTE			"note"

/* "py_stacks" */
#define FRK_PYTHON			"python"	/* also a snapshot's and a thread's */
#define FRK_WHY_NO_FRAMES		"why_no_frames"

/* "records": what the calls core could not turn into calls */
#define FRK_CONSUMED			"consumed"
#define FRK_BAD_RECORDS			"bad_records"
#define FRK_DEPTH_OVERFLOWS		"depth_overflows"
#define FRK_ORPHAN_RETURNS		"orphan_returns"
#define FRK_UNWOUND_CALLS		"unwound_calls"

/* "net": the process's TCP connections and its host's addresses (user/fr/fr_net.c) */
#define FRK_SOURCE			"source"
#define FRK_ERROR			"error"
#define FRK_NETNS			"netns"
#define FRK_READ_NS			"read_ns"
#define FRK_HOST_ADDRESSES		"host_addresses"
#define FRK_INTERFACES			"interfaces"
#define FRK_ADDRESS			"address"
#define FRK_UP				"up"
#define FRK_RUNNING			"running"
#define FRK_SOCKETS			"sockets"
/* "sockets" elements (and "state", "inode" above) */
#define FRK_LOCAL			"local"
#define FRK_REMOTE			"remote"
#define FRK_INODE			"inode"
#define FRK_TX_QUEUE			"tx_queue"
#define FRK_RX_QUEUE			"rx_queue"
#define FRK_TIMER			"timer"
#define FRK_RETRANSMITS			"retransmits"
#define FRK_BACKOFF			"backoff"
#define FRK_PROBES			"probes"
#define FRK_UNACKED			"unacked"
#define FRK_TOTAL_RETRANS		"total_retrans"
#define FRK_LAST_DATA_SENT_MS		"last_data_sent_ms"
#define FRK_LAST_ACK_RECV_MS		"last_ack_recv_ms"
#define FRK_LAST_DATA_RECV_MS		"last_data_recv_ms"

/* "comms" elements */
#define FRK_COMM_ID			"comm_id"	/* also entries, in_call, learned */
#define FRK_CROSS_RANK_ID		"cross_rank_id"
#define FRK_COMM_HANDLE			"comm_handle"
#define FRK_RANK			"rank"
#define FRK_NRANKS			"nranks"
#define FRK_DEVICE			"device"
#define FRK_PARENT			"parent"
#define FRK_SPLIT_COLOR			"split_color"
#define FRK_SPLIT_KEY			"split_key"
#define FRK_CREATED_BY			"created_by"
#define FRK_LEARNED			"learned"
#define FRK_SEQ_ORIGIN			"seq_origin"	/* in "learned" */
#define FRK_INIT_RC			"init_rc"
#define FRK_ASYNC_ERROR			"async_error"
#define FRK_LAST_ENQUEUED_SEQ		"last_enqueued_seq"
#define FRK_LAST_STARTED_SEQ		"last_started_seq"
#define FRK_LAST_COMPLETED_SEQ		"last_completed_seq"
#define FRK_LAST_P2P_SEQ		"last_p2p_seq"

/* "in_call" elements */
#define FRK_TID				"tid"		/* also a thread's */
#define FRK_THREAD_NAME			"thread_name"	/* also entries */
#define FRK_API				"api"		/* also a thread's */
#define FRK_ENTERED_NS			"entered_ns"
#define FRK_EVENTS_DROPPED_SINCE	"events_dropped_since"	/* optional */
#define FRK_SEQ				"seq"

/* "entries" elements (PyTorch's flight-recorder entry, plus ours) */
#define FRK_RECORD_ID			"record_id"
#define FRK_COLLECTIVE_SEQ_ID		"collective_seq_id"
#define FRK_P2P_SEQ_ID			"p2p_seq_id"
#define FRK_GROUP_ID			"group_id"
#define FRK_OP				"op"
#define FRK_PROFILING_NAME		"profiling_name"
#define FRK_IS_P2P			"is_p2p"
#define FRK_DTYPE			"dtype"
#define FRK_INPUT_SIZES			"input_sizes"
#define FRK_OUTPUT_SIZES		"output_sizes"
#define FRK_INPUT_DTYPES		"input_dtypes"
#define FRK_OUTPUT_DTYPES		"output_dtypes"
#define FRK_REDUCE_OP			"reduce_op"
#define FRK_ROOT			"root"
#define FRK_PEER			"peer"
#define FRK_STREAM			"stream"
#define FRK_SENDBUFF			"sendbuff"
#define FRK_RECVBUFF			"recvbuff"
#define FRK_TIME_CREATED_NS		"time_created_ns"
#define FRK_TIME_DISCOVERED_STARTED_NS	"time_discovered_started_ns"
#define FRK_TIME_DISCOVERED_COMPLETED_NS "time_discovered_completed_ns"
#define FRK_DURATION_MS			"duration_ms"
#define FRK_API_ENTER_NS		"api_enter_ns"
#define FRK_API_EXIT_NS			"api_exit_ns"
#define FRK_RC				"rc"
#define FRK_THREAD_ID			"thread_id"
#define FRK_FRAMES			"frames"	/* also a thread's */
#define FRK_FRAMES_MISSING		"frames_missing"
/* an entry's Python frames */
#define FRK_NAME			"name"		/* also a thread's */
#define FRK_FILENAME			"filename"
#define FRK_LINE			"line"		/* also a native frame's */

/* "stacks" elements: snapshots (and, as in the top level: pid, comm, cmdline, rank...) */
#define FRK_TAKEN			"taken"
#define FRK_MONO_NS			"mono_ns"
#define FRK_SAMPLES			"samples"
#define FRK_INTERVAL_MS			"interval_ms"
#define FRK_STOPPED_MS_MAX		"stopped_ms_max"
#define FRK_EXITED			"exited"
#define FRK_PTRACE_ERROR		"ptrace_error"
#define FRK_PYTHON_ERROR		"python_error"
#define FRK_THREADS			"threads"
#define FRK_URETPROBE_FRAMES		"uretprobe_frames"
/* a snapshot's "uretprobe_frames": return addresses put back from uretprobe trampolines */
#define FRK_RECOVERED			"recovered"
#define FRK_INSTANCE_READS		"instance_reads"
#define FRK_INSTANCES			"instances"
#define FRK_INSTANCE_READ_MS		"instance_read_ms"
#define FRK_STEPPED_OUT			"stepped_out"
/* a snapshot's threads */
#define FRK_WCHAN			"wchan"
#define FRK_KERNEL_STACK		"kernel_stack"
#define FRK_KERNEL_STACK_ERROR		"kernel_stack_error"
#define FRK_WHERE			"where"
#define FRK_PROGRESS			"progress"
#define FRK_MAIN			"main"
#define FRK_ISSUING			"issuing"
#define FRK_TRUNCATED			"truncated"
#define FRK_UNWIND_ERROR		"unwind_error"
/* a thread's frames */
#define FRK_KIND			"kind"
#define FRK_FUNC			"func"
#define FRK_FUNC_OFF			"func_off"
#define FRK_FILE			"file"
#define FRK_MODULE			"module"
#define FRK_BUILD_ID			"build_id"
#define FRK_MODULE_OFF			"module_off"
#define FRK_PC				"pc"
#define FRK_UNRECOVERABLE		"unrecoverable"	/* also in "uretprobe_frames" */

#endif
