"""Tier 2: a count that could not be read is written as unknown (null plus a reason), never
as 0. TPTRACE_TEST_COUNTERS_UNREADABLE makes every read of a BPF per-CPU counter fail, as a
map that cannot be read would (session__percpu_sum); without it the same runs write numbers."""
import os
from lib import WL, check_valid_trace, need_root, trace_workload
from ncclib import Job

KNOB = "TPTRACE_TEST_COUNTERS_UNREADABLE"


def traced_with_mem(env, name):
    need_root()
    trace, wl, tr = trace_workload([os.path.join(WL, "alloc_app"), "--scenario", "normal"],
                                   tracer_args=["--mem"], out_name=name, tracer_env=env)
    check_valid_trace(trace)
    return trace, tr


def test_trace_and_mem_metadata_unknown_drops():
    trace, tr = traced_with_mem({KNOB: "1"}, "drops-unknown.json")
    meta, mem = trace["tptrace"], trace["tptrace_memory"]
    assert meta["events_dropped"] is None, meta
    assert meta["events_dropped_unknown"] == "Bad file descriptor", meta
    assert "drop counter could not be read" in tr.err.text(), tr.err.text()
    assert "drops unknown" in tr.err.text(), tr.err.text()
    for key in ("events_dropped", "nested_driver_calls", "orphan_returns", "stack_failures"):
        assert mem[key] is None, (key, mem)
    assert mem["counters_unknown"] == "Bad file descriptor", mem
    # the calls themselves were recorded: only the counts are unknown
    assert meta["calls"] > 0 and mem["calls"] > 0


def test_trace_and_mem_metadata_known_drops():
    trace, tr = traced_with_mem(None, "drops-known.json")
    meta, mem = trace["tptrace"], trace["tptrace_memory"]
    assert meta["events_dropped"] == 0 and "events_dropped_unknown" not in meta, meta
    assert mem["events_dropped"] == 0 and "counters_unknown" not in mem, mem


def test_fr_dump_unknown_drops():
    need_root()
    job = Job(2, "healthy", steps=2, extra=["--init-after-go"], name="drops-unknown")
    try:
        os.environ[KNOB] = "1"
        try:
            job.record()
        finally:
            del os.environ[KNOB]
        job.run_clean()
    finally:
        job.kill()
    dumps = job.dumps()
    assert sorted(dumps) == [0, 1], dumps.keys()
    for d in dumps.values():
        assert d["events_dropped"] is None, d["events_dropped"]
        assert d["events_dropped_unknown"] == "Bad file descriptor"
        assert d["entries"], "the calls were recorded"


def test_exit_code_without_exit_tracepoint():
    """Without the sched_process_exit tracepoint (TPTRACE_NO_EXIT_TP stands in for a kernel
    without it) the exit is still seen through the pidfd, and its code is unknown, not 0."""
    need_root()
    argv = [os.path.join(WL, "sim_train"), "--steps", "2", "--kernel-us", "500"]
    trace, wl, tr = trace_workload(argv, out_name="no-exit-tp.json",
                                   tracer_env={"TPTRACE_NO_EXIT_TP": "1"})
    t = trace["tptrace"]["targets"][0]
    assert t["exited"] is True, t
    assert t["exit_code"] is None and t["exit_code_unknown"] == "no exit tracepoint in this kernel", t
    assert f"pid {wl.pid} (sim_train) exited" in tr.err.text(), tr.err.text()
    trace, wl, tr = trace_workload(argv, out_name="exit-tp.json")
    t = trace["tptrace"]["targets"][0]
    assert t["exited"] is True and t["exit_code"] == 0 and "exit_code_unknown" not in t, t
