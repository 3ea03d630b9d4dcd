"""Tier 2 on the simulated CUDA stack (tests/sim): exact event counts, argument values, sync
durations consistent with the simulated kernel times, and per-thread ordering."""
import os
from lib import (WL, Skip, Tracer, Workload, bpf_link_types, calls, check_valid_trace, counts,
                 kernel_at_least, load_trace, need_root, tmp_path, trace_workload)

STEP = ["cudaLaunchKernel"] * 4 + ["cudaMemcpyAsync", "cudaEventRecord", "cudaStreamWaitEvent",
                                   "cudaMemcpyAsync", "cudaEventQuery", "cudaStreamSynchronize"]


def run_train(steps, threads, kernel_us, name, tracer_env=None, extra=()):
    argv = [os.path.join(WL, "sim_train"), "--steps", str(steps), "--threads", str(threads),
            "--kernel-us", str(kernel_us)] + list(extra)
    return trace_workload(argv, out_name=name, tracer_env=tracer_env)


def check_thread(evs, steps, kernel_us):
    names = [e["name"] for e in evs]
    assert names == STEP * steps + ["cudaDeviceSynchronize"], names
    ts = [e["ts"] for e in evs]
    assert ts == sorted(ts), "one thread's calls are in time order"
    for s in range(steps):
        step = evs[s * len(STEP):(s + 1) * len(STEP)]
        gemm, relu = step[0:3], step[3]
        stream_a = gemm[0]["args"]["stream"]
        stream_b = relu["args"]["stream"]
        assert stream_a != stream_b
        for g in gemm:
            assert g["args"]["kernel"] == "fake_gemm"
            assert g["args"]["grid"] == [64, 2, 1] and g["args"]["block"] == [256, 1, 1]
            assert g["args"]["shared memory"] == 4096 and g["args"]["stream"] == stream_a
        assert relu["args"]["kernel"] == "fake_relu"
        assert relu["args"]["grid"] == [128, 1, 1] and relu["args"]["block"] == [128, 1, 1]
        assert relu["args"]["shared memory"] == 0
        h2d, rec, wait, d2h, query, sync = step[4:]
        assert (h2d["args"]["bytes"], h2d["args"]["kind"], h2d["args"]["stream"]) == (1 << 20, "HtoD", stream_a)
        assert (d2h["args"]["bytes"], d2h["args"]["kind"], d2h["args"]["stream"]) == (4096, "DtoH", stream_b)
        assert rec["args"]["stream"] == stream_a and wait["args"]["stream"] == stream_b
        assert rec["args"]["event"] == wait["args"]["event"] == query["args"]["event"]
        assert query["args"]["rc"] in (0, 600)
        assert sync["args"]["rc"] == 0 and sync["args"]["stream"] == stream_b
        # B waits for the event after A's three kernels: the sync cannot end before they ran
        # (the GPU starts a kernel no earlier than its launch)
        sync_end = sync["ts"] + sync["dur"]
        assert sync_end >= gemm[0]["ts"] + 3 * kernel_us, (s, sync_end - gemm[0]["ts"])
        # ... and does not block far longer than the simulated work (generous for a busy VM)
        assert sync_end <= gemm[0]["ts"] + 3 * kernel_us + 150 + 50000, (s, sync_end - gemm[0]["ts"])
        # entry-only calls carry no duration; syncs and queries do
        for e in gemm + [relu, h2d, rec, wait, d2h]:
            assert e["dur"] == 0 and "rc" not in e["args"], e


def test_sim_train_counts_and_durations():
    need_root()
    steps, kernel_us = 6, 2000
    trace, wl, tr = run_train(steps, 1, kernel_us, "train1.json")
    check_valid_trace(trace)
    evs = calls(trace, pid=wl.pid)
    assert counts(evs) == {"cudaLaunchKernel": 4 * steps, "cudaMemcpyAsync": 2 * steps,
                           "cudaEventRecord": steps, "cudaStreamWaitEvent": steps,
                           "cudaEventQuery": steps, "cudaStreamSynchronize": steps,
                           "cudaDeviceSynchronize": 1}, counts(evs)
    tids = {e["tid"] for e in evs}
    assert len(tids) == 1 and wl.pid not in tids, "the loop runs on a worker thread"
    check_thread(evs, steps, kernel_us)
    meta = trace["tptrace"]
    assert meta["events_dropped"] == 0 and meta["launches_named"] == meta["launches"] == 4 * steps
    # 4 launches, 2 copies, record, wait, query (+ret), sync (+ret) per step, devsync (+ret)
    assert meta["events_recorded"] == steps * 12 + 2, meta["events_recorded"]
    # correlation ids are unique per trace
    corr = [e["args"]["correlation"] for e in evs]
    assert len(set(corr)) == len(corr)


def test_sim_train_threads():
    need_root()
    steps, threads, kernel_us = 4, 3, 1000
    # the workers stay alive 500 ms after their last call: names are read from /proc while
    # the threads exist
    trace, wl, tr = run_train(steps, threads, kernel_us, "train3.json",
                              extra=["--linger-ms", "500"])
    evs = calls(trace, pid=wl.pid)
    by_tid = {}
    for e in evs:
        by_tid.setdefault(e["tid"], []).append(e)
    assert len(by_tid) == threads, by_tid.keys()
    for tid, tevs in by_tid.items():
        check_thread(tevs, steps, kernel_us)
    # one thread_name per worker, the name it gave itself (sim_train: "train-w<i>")
    names = [(e["tid"], e["args"]["name"]) for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == wl.pid]
    assert sorted(n for _, n in names) == [f"train-w{i}" for i in range(threads)], names
    assert {tid for tid, _ in names} == set(by_tid), (names, by_tid.keys())


def links_case(steps, kernel_us, name, tracer_env):
    """sim_train traced with the link types tptrace holds while attached."""
    out = tmp_path(name)
    wl = Workload([os.path.join(WL, "sim_train"), "--steps", str(steps), "--kernel-us",
                   str(kernel_us)])
    try:
        tr = Tracer(["-p", str(wl.pid), "-o", out], env=tracer_env)
        links = bpf_link_types(tr.p.pid)
        wl.go()
        wl.wait_done()
        wl.finish()
        assert tr.wait(30) == 0, tr.err.text()
    finally:
        wl.kill()
    trace = load_trace(out)
    check_valid_trace(trace)
    return trace, wl, links


def test_sim_train_uprobe_multi_links():
    """Linux >= 6.6: the probes of a library go into uprobe_multi links (entry, return), not
    one perf link per probe."""
    need_root()
    if not kernel_at_least(6, 6):
        raise Skip(f"kernel {os.uname().release} has no uprobe_multi")
    trace, wl, links = links_case(3, 1000, "train-multi.json", None)
    check_thread(calls(trace, pid=wl.pid), 3, 1000)
    assert links.get("uprobe_multi", 0) >= 1 and links.get("uretprobe_multi", 0) >= 1, links
    assert links.get("perf", 0) == 0, links


def test_sim_train_single_probe_links():
    """The per-probe attach path (kernels before 6.6 have no uprobe_multi) records the same;
    TPTRACE_NO_UPROBE_MULTI takes it: one perf link per probe, no uprobe_multi link."""
    need_root()
    steps, kernel_us = 3, 1000
    trace, wl, links = links_case(steps, kernel_us, "train-single.json",
                                  {"TPTRACE_NO_UPROBE_MULTI": "1"})
    check_thread(calls(trace, pid=wl.pid), steps, kernel_us)
    assert "uprobe_multi" not in links and "uretprobe_multi" not in links, links
    assert links.get("perf") == trace["tptrace"]["probes_attached"], (links, trace["tptrace"])
