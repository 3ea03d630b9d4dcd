// SPDX-License-Identifier: GPL-2.0 OR MIT
/* Pending uretprobe returns of every thread a task iterator visits (bpf/uretinst.h). User
 * space (user/stacks/uretinst.c) attaches it with a pid filter, so one read() walks the threads of
 * one process. The lists are read without the thread's cooperation: a running thread may
 * push or pop while we read, so the snapshot is only as good as the thread is still; the
 * unwinder reads it while the threads are ptrace-stopped and re-checks every slot.
 *
 * Fields are read with CO-RE by name: return_instances, depth, stack, orig_ret_vaddr,
 * chained and next have kept their names since before the hprobe rework (6.13); only their
 * offsets moved. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "uretinst.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("iter/task")
int uretinst_dump(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct uretinst_thread th = { .type = URETINST_THREAD };
	struct uretinst_inst ri_rec = { .type = URETINST_INST };
	struct return_instance *ri;
	struct uprobe_task *utask;

	if (!task)
		return 0;
	/* no [uprobes] area in the mm: no trampoline can be on this thread's stack */
	th.xol_vaddr = BPF_CORE_READ(task, mm, uprobes_state.xol_area, vaddr);
	if (!th.xol_vaddr)
		return 0;
	th.tid = BPF_CORE_READ(task, pid);
	th.tgid = BPF_CORE_READ(task, tgid);
	utask = BPF_CORE_READ(task, utask);
	ri = utask ? BPF_CORE_READ(utask, return_instances) : NULL;
	if (utask)
		th.depth = BPF_CORE_READ(utask, depth);
	bpf_seq_write(seq, &th, sizeof(th));
	ri_rec.tid = th.tid;
	for (int i = 0; i < URETINST_MAX && ri; i++) {
		ri_rec.func = BPF_CORE_READ(ri, func);
		ri_rec.stack = BPF_CORE_READ(ri, stack);
		ri_rec.orig_ret_vaddr = BPF_CORE_READ(ri, orig_ret_vaddr);
		ri_rec.chained = BPF_CORE_READ(ri, chained);
		bpf_seq_write(seq, &ri_rec, sizeof(ri_rec));
		ri = BPF_CORE_READ(ri, next);
	}
	if (ri) {
		th.type = URETINST_CUT;
		bpf_seq_write(seq, &th, sizeof(th));
	}
	return 0;
}
