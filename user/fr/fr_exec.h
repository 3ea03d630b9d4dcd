/* SPDX-License-Identifier: MIT */
/* tptrace fr -a, exact from exec: the NCCL and CUDA libraries are probed per FILE for every
 * process (one uprobe per inode covers each process that maps it, now or later), so a process
 * started after the recorder is recorded from its first NCCL call. Library files are learnt
 * from the processes running at start and then from the kernel: bpf/cuda.bpf.c's fr_map sees
 * every executable mapping of a libnccl / libcudart / libcuda file (TP_REC_MAP) and the
 * recorder attaches a new inode at once; fr_exec (TP_REC_EXEC) ends the recording of a process
 * that execs. The entry and return programs drop the calls of processes that never mapped
 * libnccl (the fr_pids map), so CUDA-only processes cost one hash lookup per call. */
#ifndef TPTRACE_FR_EXEC_H
#define TPTRACE_FR_EXEC_H

#include <stdbool.h>
#include <stdint.h>

struct elfsym_cache;
struct flightrec;
struct session_bpf;
struct target_probes;

/* What the recorder does about one process (fr_main.c). */
struct fr_exec_ops {
	void *ctx;
	/* pid mapped a library of kind TP_MAP_*: start recording it (NCCL) or rescan it */
	void (*mapped)(void *ctx, int pid, uint32_t kind);
	/* pid called exec: its recording ended (flightrec__exec already called) */
	void (*execd)(void *ctx, int pid);
};

struct fr_exec;

/* p: the probe programs (covered is set on it by fr_exec__new to leave the files probed for
 * every process to these). Registers with s, whose consumer hands it the TP_REC_MAP and
 * TP_REC_EXEC records in ring order. NULL after an error line. */
struct session;
struct fr_exec *fr_exec__new(struct session_bpf *b, struct elfsym_cache *cache,
			     struct target_probes *p, struct session *s, struct flightrec *fr,
			     const struct fr_exec_ops *ops);
void fr_exec__free(struct fr_exec *x);

/* The libnccl / libcudart / libcuda files pid maps now: each not known yet is probed for every
 * process. Returns how many files were added (>= 0) or a negative errno (pid gone). */
int fr_exec__learn_pid(struct fr_exec *x, int pid);
/* Lets pid's calls through the BPF filter (recorded processes), or drops them. */
void fr_exec__allow_pid(struct fr_exec *x, int pid, bool allow);


struct fr_exec_stats {
	int files;			/* library files probed for every process */
	int files_failed;		/* files whose probes would not attach (per pid instead) */
	uint64_t maps_seen;		/* TP_REC_MAP records */
	uint64_t last_attach_ns;	/* exec-map event -> probes attached, the newest file */
	uint64_t max_attach_ns;
};
void fr_exec__stats(const struct fr_exec *x, struct fr_exec_stats *st);

#endif
