// SPDX-License-Identifier: GPL-2.0 OR MIT
/* Reference BPF programs for the overhead benchmarks (tests/bench/bench_probe.c attaches one):
 *   empty_entry / empty_return  the floor: a uprobe/uretprobe that does nothing, so
 *                               "tptrace cost / empty cost" isolates what our program adds
 *   ladder_*                    tptrace's entry program taken apart step by step, to see which
 *                               part costs (ring wakeups, record size, user-memory reads)
 * Each ladder step is a copy of bpf/cuda.bpf.c's cuda_entry for a cudaLaunchKernel cookie
 * (3 stack qwords + caller2) with one thing removed or changed. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "cuda.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} events SEC(".maps");

/* bench_probe.c drains the ring in user space like tptrace does (with wakeups) */
const volatile __u64 wake_threshold = 0;

SEC("uprobe")
int BPF_KPROBE(empty_entry)
{
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(empty_return)
{
	return 0;
}

/* pid/tid + timestamp only, no output */
SEC("uprobe")
int BPF_KPROBE(ladder_helpers)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 ts = bpf_ktime_get_ns();

	asm volatile("" :: "r"(pid_tgid), "r"(ts));
	return 0;
}

static __always_inline int fill_submit(struct pt_regs *ctx, __u64 submit_flags, bool reads,
				       bool adaptive)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct tp_rec_call *rec;
	__u16 flags = 0;

	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (!rec)
		return 0;
	rec->type = TP_REC_CALL;
	rec->api = 0;
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
	rec->ts = bpf_ktime_get_ns();
	rec->args[0] = PT_REGS_PARM1(ctx);
	rec->args[1] = PT_REGS_PARM2(ctx);
	rec->args[2] = PT_REGS_PARM3(ctx);
	rec->args[3] = PT_REGS_PARM4(ctx);
	rec->args[4] = PT_REGS_PARM5(ctx);
	rec->args[5] = ctx->r9;
	if (reads) {
		if (bpf_probe_read_user(rec->stack, 3 * sizeof(__u64), (void *)PT_REGS_SP(ctx)))
			flags |= TP_CALL_STACK_FAULT;
		if (bpf_probe_read_user(&rec->caller2, sizeof(rec->caller2),
					(void *)(PT_REGS_FP(ctx) + 8)))
			flags |= TP_CALL_CALLER2_FAULT;
	}
	rec->flags = flags;
	if (adaptive)	/* wake the reader only once a batch is waiting */
		submit_flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wake_threshold ?
			       BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(rec, submit_flags);
	return 0;
}

/* tptrace's launch path as is: 176-byte record, 2 user reads, default (per-record) wakeup */
SEC("uprobe")
int BPF_KPROBE(ladder_full)
{
	return fill_submit(ctx, 0, true, false);
}

/* ... without the two bpf_probe_read_user calls */
SEC("uprobe")
int BPF_KPROBE(ladder_noreads)
{
	return fill_submit(ctx, 0, false, false);
}

/* ... with BPF_RB_NO_WAKEUP (the reader polls on a timer) */
SEC("uprobe")
int BPF_KPROBE(ladder_nowake)
{
	return fill_submit(ctx, BPF_RB_NO_WAKEUP, true, false);
}

/* ... waking the reader only when wake_threshold bytes are waiting */
SEC("uprobe")
int BPF_KPROBE(ladder_batchwake)
{
	return fill_submit(ctx, 0, true, true);
}

/* ... no wakeup and no user reads: the ring alone */
SEC("uprobe")
int BPF_KPROBE(ladder_ringonly)
{
	return fill_submit(ctx, BPF_RB_NO_WAKEUP, false, false);
}

/* one 24-byte bpf_probe_read_user of the stack into the BPF stack, no ring: the read alone */
SEC("uprobe")
int BPF_KPROBE(ladder_readonly)
{
	__u64 slots[3];
	long err = bpf_probe_read_user(slots, sizeof(slots), (void *)PT_REGS_SP(ctx));

	asm volatile("" :: "r"(err), "r"(slots[1]));
	return 0;
}

/* read the user stack into the BPF stack first, then reserve, fill and submit (no wakeup) */
SEC("uprobe")
int BPF_KPROBE(ladder_readfirst)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 stk[3] = {};
	struct tp_rec_call *rec;
	long err = bpf_probe_read_user(stk, sizeof(stk), (void *)PT_REGS_SP(ctx));

	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (!rec)
		return 0;
	rec->type = TP_REC_CALL;
	rec->api = 0;
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
	rec->ts = bpf_ktime_get_ns();
	rec->args[0] = PT_REGS_PARM1(ctx);
	rec->args[1] = PT_REGS_PARM2(ctx);
	rec->args[2] = PT_REGS_PARM3(ctx);
	rec->args[3] = PT_REGS_PARM4(ctx);
	rec->args[4] = PT_REGS_PARM5(ctx);
	rec->args[5] = ctx->r9;
	rec->stack[0] = stk[0];
	rec->stack[1] = stk[1];
	rec->stack[2] = stk[2];
	rec->flags = err ? TP_CALL_STACK_FAULT : 0;
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	return 0;
}

/* reserve, read the user stack into the BPF stack, then fill and submit (no wakeup) */
SEC("uprobe")
int BPF_KPROBE(ladder_readafter)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 stk[3] = {};
	struct tp_rec_call *rec;
	long err;

	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (!rec)
		return 0;
	err = bpf_probe_read_user(stk, sizeof(stk), (void *)PT_REGS_SP(ctx));
	rec->type = TP_REC_CALL;
	rec->api = 0;
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
	rec->ts = bpf_ktime_get_ns();
	rec->args[0] = PT_REGS_PARM1(ctx);
	rec->args[1] = PT_REGS_PARM2(ctx);
	rec->args[2] = PT_REGS_PARM3(ctx);
	rec->args[3] = PT_REGS_PARM4(ctx);
	rec->args[4] = PT_REGS_PARM5(ctx);
	rec->args[5] = ctx->r9;
	rec->stack[0] = stk[0];
	rec->stack[1] = stk[1];
	rec->stack[2] = stk[2];
	rec->flags = err ? TP_CALL_STACK_FAULT : 0;
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	return 0;
}

/* ring_then_read plus what tptrace's entry adds: the attach cookie, a size chosen at run time
 * and the adaptive wake-up */
SEC("uprobe")
int BPF_KPROBE(ladder_tptracelike)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 stk[4] = {};
	struct tp_rec_call *rec;
	long err;

	if (cookie & 1)
		rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	else
		rec = bpf_ringbuf_reserve(&events, 112, 0);
	if (!rec)
		return 0;
	err = bpf_probe_read_user(stk, 24, (void *)PT_REGS_SP(ctx));
	rec->type = TP_REC_CALL;
	rec->api = 0;
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
	rec->ts = bpf_ktime_get_ns();
	rec->args[0] = PT_REGS_PARM1(ctx);
	rec->args[1] = PT_REGS_PARM2(ctx);
	rec->args[2] = PT_REGS_PARM3(ctx);
	rec->args[3] = PT_REGS_PARM4(ctx);
	rec->args[4] = PT_REGS_PARM5(ctx);
	rec->args[5] = ctx->r9;
	rec->stack[0] = stk[0];
	rec->stack[1] = stk[1];
	rec->stack[2] = stk[2];
	rec->stack[3] = stk[3];
	rec->caller2 = 0;
	rec->flags = err ? TP_CALL_STACK_FAULT : 0;
	bpf_ringbuf_submit(rec, bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wake_threshold ?
			   BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	return 0;
}

/* a 64-byte record (type, tid, ts, 6 registers), default wakeup */
SEC("uprobe")
int BPF_KPROBE(ladder_small)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 *rec = bpf_ringbuf_reserve(&events, 64, 0);

	if (!rec)
		return 0;
	rec[0] = pid_tgid;
	rec[1] = bpf_ktime_get_ns();
	rec[2] = PT_REGS_PARM1(ctx);
	rec[3] = PT_REGS_PARM2(ctx);
	rec[4] = PT_REGS_PARM3(ctx);
	rec[5] = PT_REGS_PARM4(ctx);
	rec[6] = PT_REGS_PARM5(ctx);
	rec[7] = ctx->r9;
	bpf_ringbuf_submit(rec, 0);
	return 0;
}
