// SPDX-License-Identifier: GPL-2.0 OR MIT
/* The floor of the overhead benchmarks (tests/bench/bench_probe.c attaches them): a uprobe
 * and a uretprobe that do nothing, so "tptrace cost / empty cost" isolates what our program
 * adds. The ladder of tptrace's own entry program is not here: bench.mk compiles
 * bpf/cuda.bpf.c itself with TP_BENCH_STOP cuts, so it measures the production code. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

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
