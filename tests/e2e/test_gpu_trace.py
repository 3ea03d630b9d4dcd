"""Tier 2: `tptrace -p PID --gpu` on the simulated stack (tests/sim: runtime + CUPTI). The
agent is injected into the running workload, CUPTI records come back over shared memory and
are joined with the uprobe launch events: every kernel on its stream track with the
simulated duration, the same correlation as its launch, an ac2g arrow between them."""
import os
import re
import time
from gpulib import agent_mapped, need_ptrace, normalize_output, tpsim_items
from lib import (WL, Tracer, Workload, calls, check_valid_trace, fresh_tmp_path, load_trace,
                 need_root, run_tptrace, tmp_path, trace_workload)

SIM_TRAIN = os.path.join(WL, "sim_train")


def abs_ns(trace, ts_us):
    return trace["tptrace"]["base_mono_ns"] + round(ts_us * 1000)


def test_gpu_kernels_joined_with_launches():
    need_root()
    need_ptrace()
    steps, kus = 3, 800
    trace, wl, tr = trace_workload(
        [os.path.join(WL, "sim_train"), "--steps", str(steps), "--kernel-us", str(kus)],
        tracer_args=["--gpu"], env={"TPSIM_VERBOSE": "1"}, out_name="gpu-joined.json")
    check_valid_trace(trace)
    items = tpsim_items(wl.err.text())
    kernels = {e["args"]["correlation"]: e for e in trace["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") == "kernel"}
    sim_kernels = {c: i for c, i in items.items() if i["kind"] == "kernel"}
    assert len(sim_kernels) == 4 * steps and set(kernels) == set(sim_kernels), \
        (sorted(kernels), sorted(sim_kernels))
    for corr, item in sim_kernels.items():
        k = kernels[corr]
        assert k["pid"] == 0 and k["tid"] == item["stream"], (k, item)
        assert k["name"] in ("fake_gemm", "fake_relu")
        # the simulated start/end, through CUPTI's timestamps on CLOCK_MONOTONIC
        assert abs(abs_ns(trace, k["ts"]) - item["start"]) < 2000, (k["ts"], item)
        assert abs(k["dur"] * 1000 - (item["end"] - item["start"])) < 2000
        # the same kernel as the sim ran under this correlation, for exactly its time on the
        # sim's device clock (a busy host no longer stretches it: 12x was seen before)
        assert k["name"] == item["name"], (k, item)
        want_us = kus if k["name"] == "fake_gemm" else kus // 2
        assert k["dur"] == want_us, (k["name"], k["dur"])
        assert k["args"]["grid"] in ([64, 2, 1], [128, 1, 1])
    launches = calls(trace, pid=wl.pid, name="cudaLaunchKernel")
    assert len(launches) == 4 * steps
    flows_s = {e["id"]: e for e in trace["traceEvents"] if e.get("ph") == "s"}
    flows_f = {e["id"]: e for e in trace["traceEvents"] if e.get("ph") == "f"}
    for l in launches:
        corr = l["args"]["correlation"]
        assert corr in kernels, f"launch {corr} has no kernel"
        k = kernels[corr]
        assert k["name"] == l["args"]["kernel"]
        assert flows_s[corr]["tid"] == l["tid"] and flows_s[corr]["cat"] == "ac2g"
        assert flows_f[corr]["pid"] == 0 and flows_f[corr]["tid"] == k["tid"]
        assert flows_f[corr]["bp"] == "e"
        assert l["ts"] <= k["ts"], "a kernel starts after its launch"
        # the sim's own record of the item says which host thread enqueued it
        assert sim_kernels[corr]["tid"] == l["tid"], (l, sim_kernels[corr])
        # joined: drawn with CUPTI's start and duration (the probe has only the entry), the
        # arrow from that start
        assert l["dur"] > 0 and "cupti" not in l["args"], l
        assert flows_s[corr]["ts"] == l["ts"], (flows_s[corr], l)
    # streams matchable by eye: a host call's "stream track" is the name of the GPU track its
    # work ran on; every launch has it (its kernel was in when it was written, or an earlier
    # launch on the same handle told), and one handle is always one track
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
              if e.get("ph") == "M" and e.get("name") == "thread_name" and e["pid"] == 0}
    by_handle = {}
    for l in launches:
        k = kernels[l["args"]["correlation"]]
        assert l["args"].get("stream track") == tracks[(0, k["tid"])], (l["args"], k)
        by_handle.setdefault(l["args"]["stream"], set()).add(l["args"]["stream track"])
    assert len(by_handle) == 2 and all(len(v) == 1 for v in by_handle.values()), by_handle
    for c in calls(trace, pid=wl.pid, name="cudaMemcpyAsync"):
        item = items.get(c["args"]["correlation"])
        assert item and item["kind"] == "memcpy" and item["tid"] == c["tid"], (c, item)
        assert int(item["bytes"]) == c["args"]["bytes"], (c, item)
        assert c["dur"] > 0, c
    copies = [e for e in trace["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    assert sorted(e["args"]["bytes"] for e in copies) == [4096] * steps + [1 << 20] * steps
    assert {e["name"] for e in copies} == {"Memcpy HtoD (Pinned -> Device)",
                                           "Memcpy DtoH (Device -> Pinned)"}
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert (0, "GPU 0") in names
    g = trace["tptrace"]["targets"][0]["gpu"]
    assert g["attached"] and g["records_dropped"] == 0 and g["kernels"] == 4 * steps
    assert g["clock_residual_ns"] < 50000, g["clock_residual_ns"]
    # launches, async copies, event records and stream waits join their CUPTI records; the
    # sim writes a record for each (and nothing for calls tptrace does not probe)
    j = trace["tptrace"]["gpu_join"]
    assert j["joined"] == 8 * steps == j["calls"], j
    assert j["unjoined"] == {"before_enable": 0, "after_disable": 0, "no_record": 0, "ambiguous": 0}, j
    assert j["flows"] == 6 * steps and j["gpu_work_unclaimed"] == 0, j
    # the end-of-trace summary says the same: the arrows on its one line, no problem line
    assert f", {6 * steps} launch->kernel arrows, 0 events dropped" in tr.err.text(), tr.err.text()
    assert "--gpu:" not in tr.err.text(), tr.err.text()


def test_gpu_detach_leaves_target_running_and_unchanged():
    need_root()
    need_ptrace()
    argv = [os.path.join(WL, "sim_train"), "--steps", "1500", "--kernel-us", "500", "--hold"]
    # reference run, no tracer
    ref = Workload(argv)
    ref.go()
    ref.wait_done()
    ref.finish()
    out = tmp_path("gpu-detach.json")
    wl = Workload(argv)
    try:
        wl.go()
        tr = Tracer(["-p", str(wl.pid), "-o", out, "--gpu", "-d", "1"])
        assert tr.wait(60) == 0, tr.err.text()
        # the agent took itself out; the job goes on and ends as without it
        assert agent_mapped(wl.pid) == [], agent_mapped(wl.pid)
        wl.wait_done()
        assert wl.finish() == 0
    finally:
        wl.kill()
    trace = load_trace(out)
    g = trace["tptrace"]["targets"][0]["gpu"]
    assert g["agent_unloaded"] is True and g["injected"] is True, g
    assert g["kernels"] > 0
    assert normalize_output(wl.out.text()) == normalize_output(ref.out.text())


def test_gpu_refusals():
    need_root()
    need_ptrace()
    # a process that never loaded CUDA
    wl = Workload([os.path.join(WL, "nocuda")])
    try:
        rc, _, err = run_tptrace(["-p", str(wl.pid), "--gpu", "--wait", "-d", "1", "-o",
                                  tmp_path("gpu-nocuda.json")])
        assert rc == 1
        lines = [l for l in err.splitlines() if l.startswith("tptrace: --gpu")]
        assert len(lines) == 1 and "CUDA" in lines[0], err
        assert agent_mapped(wl.pid) == []
    finally:
        wl.kill()
    # another CUPTI subscriber (torch.profiler, nsys) already active
    wl = Workload([os.path.join(WL, "sim_train"), "--steps", "2"],
                  env={"TPSIM_CUPTI_OTHER_SUBSCRIBER": "1"})
    try:
        rc, _, err = run_tptrace(["-p", str(wl.pid), "--gpu", "-d", "1", "-o",
                                  tmp_path("gpu-busy.json")])
        assert rc == 1
        lines = [l for l in err.splitlines() if l.startswith("tptrace: --gpu")]
        assert len(lines) == 1 and "subscriber" in lines[0].lower(), err
        assert agent_mapped(wl.pid) == []
        wl.go()
        wl.wait_done()
    finally:
        wl.kill()


def test_gpu_names_kernels_the_symbols_cannot():
    """A stripped nvcc binary: handles made before attach have no symbol to name them; the
    kernels CUPTI reports name those launches (and later launches of the same handle)."""
    need_root()
    need_ptrace()
    import shutil
    import subprocess
    src = os.path.join(WL, "nvcc_shared")
    dst = tmp_path("nvcc_stripped")
    shutil.copy(src, dst)
    subprocess.run(["strip", "--strip-all", dst], check=True)
    trace, wl, tr = trace_workload([dst, "--iters", "3"], tracer_args=["--gpu"],
                                   out_name="gpu-stripped.json")
    launches = [e for e in calls(trace, pid=wl.pid) if "LaunchKernel" in e["name"]]
    assert len(launches) == 9, [e["name"] for e in launches]
    names = [e["args"]["kernel"] for e in launches]
    assert names == ["scale_vec(float*, float, int)", "void ns::tk<int>(int*, int)",
                     "late_kernel(int*)"] * 3, names
    sources = {e["args"]["kernel"]: e["args"]["kernel source"] for e in launches}
    # no symbols at all: the two kernels whose handles predate attach come from CUPTI;
    # late_kernel's handle was made after attach, through __cudaGetKernel (named by CUPTI too
    # since the stub has no symbol either)
    assert sources["scale_vec(float*, float, int)"] == "cupti", sources
    assert sources["void ns::tk<int>(int*, int)"] == "cupti", sources


def test_gpu_join_waits_for_a_late_agent():
    """The agent's flush loop falls seconds behind (a starved thread on a loaded host, here a
    CUPTI whose flushes take 3 s): the join waits for what the agent has delivered, not for
    the wall clock, so every launch is still joined to its CUPTI record and kernel."""
    need_root()
    need_ptrace()
    steps = 4
    trace, wl, tr = trace_workload(
        [os.path.join(WL, "sim_train"), "--steps", str(steps), "--kernel-us", "500000"],
        tracer_args=["--gpu"], env={"TPSIM_CUPTI_FLUSH_DELAY_MS": "3000"},
        out_name="gpu-late-agent.json", done_timeout=120)
    check_valid_trace(trace)
    launches = calls(trace, pid=wl.pid, name="cudaLaunchKernel")
    assert len(launches) == 4 * steps, len(launches)
    # the run outlasted the 2 s a call may wait, counted from the calls' arrival
    assert launches[-1]["ts"] - launches[0]["ts"] > 3e6, (launches[0]["ts"], launches[-1]["ts"])
    j = trace["tptrace"]["gpu_join"]
    assert j["unjoined"] == {"before_enable": 0, "after_disable": 0, "no_record": 0, "ambiguous": 0}, j
    kernels = {e["args"]["correlation"] for e in trace["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") == "kernel"}
    for l in launches:
        assert "cupti" not in l["args"] and l["args"]["correlation"] in kernels, l


# ---- CUPTI as unkind as the real one (tests/sim/cupti/cupti.c header) ----------------------

def traced_until_stopped(argv, env, out_name, tracer_args=()):
    """tptrace --gpu over a --hold workload, stopped (SIGINT) after the workload's DONE: the
    agent is detached with its last forced flush while the process is still there."""
    out = fresh_tmp_path(out_name)
    wl = Workload(argv, env=env)
    try:
        tr = Tracer(["-p", str(wl.pid), "-o", out, "--gpu"] + list(tracer_args))
        wl.go()
        wl.wait_done()
        rc = tr.stop()
        assert rc == 0, f"tptrace rc={rc}: {tr.err.text()}"
        assert wl.finish() == 0, wl.err.text()
    finally:
        wl.kill()
    return load_trace(out), wl, tr


def sim_cupti_line(wl):
    m = re.search(r"^tpsim: cupti dropped (\d+) records, returned (\d+) buffers before an older "
                  r"one$", wl.err.text(), re.M)
    assert m, wl.err.text()[-2000:]
    return int(m[1]), int(m[2])


def test_gpu_default_thread_id_does_not_join():
    """CUPTI's default thread id on Linux is pthread_self(), not the tid the probes see: an
    agent that does not call cuptiSetThreadIdType(SYSTEM) (TPTRACE_AGENT_DEFAULT_TID=1) gets
    every record and joins none of them. Ours sets SYSTEM: the same run without the hook joins
    every call (test_gpu_kernels_joined_with_launches)."""
    need_root()
    need_ptrace()
    steps = 3
    trace, wl, tr = trace_workload(
        [SIM_TRAIN, "--steps", str(steps), "--kernel-us", "300"], tracer_args=["--gpu"],
        env={"TPSIM_VERBOSE": "1", "TPTRACE_AGENT_DEFAULT_TID": "1"}, out_name="gpu-tid.json")
    check_valid_trace(trace)
    kernels = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert len(kernels) == 4 * steps, len(kernels)
    j = trace["tptrace"]["gpu_join"]
    assert j["calls"] == 8 * steps and j["joined"] == 0, j
    assert j["unjoined"]["no_record"] == 8 * steps and j["flows"] == 0, j
    # the records came, under thread ids that are no thread of the process
    assert j["api_records_unclaimed"]["unprobed"] >= 8 * steps, j
    for l in calls(trace, pid=wl.pid, name="cudaLaunchKernel"):
        assert l["args"].get("cupti") == "no CUPTI record", l["args"]


def test_gpu_cupti_drops_counted_exactly_and_said():
    """Buffers too small for a kernel record (TPTRACE_AGENT_BUF_BYTES=128; a
    CUpti_ActivityKernel10 is 216 bytes, an API record 40): CUPTI drops every kernel record
    and counts it; tptrace reports exactly the sim's count in the metadata and on stderr."""
    need_root()
    need_ptrace()
    steps = 4
    trace, wl, tr = traced_until_stopped(
        [SIM_TRAIN, "--steps", str(steps), "--kernel-us", "300", "--hold"],
        {"TPSIM_VERBOSE": "1", "TPTRACE_AGENT_BUF_BYTES": "128"}, "gpu-drops.json")
    dropped, _ = sim_cupti_line(wl)
    sim_kernels = [i for i in tpsim_items(wl.err.text()).values() if i["kind"] == "kernel"]
    assert dropped == len(sim_kernels) == 4 * steps, (dropped, len(sim_kernels))
    g = trace["tptrace"]["targets"][0]["gpu"]
    assert g["records_dropped_cupti"] == dropped and g["records_dropped_ring"] == 0, g
    assert g["kernels"] == 0 and g["memcpys"] == 2 * steps, g
    line = (f"tptrace: --gpu: pid {wl.pid}: CUPTI dropped {dropped} activity records (its "
            f"buffers were full)")
    assert [l for l in tr.err.text().splitlines() if l.startswith(line)], tr.err.text()


def test_gpu_join_with_buffers_out_of_order():
    """Small buffers (TPSIM_CUPTI_BUF_RECORDS=8) that CUPTI hands back out of order (every
    other one after the next, the sim's default): 3 threads launching; every launch is still
    joined to its own kernel. A join that takes a thread's newest record as proof that its
    older ones are in calls launches of the late buffers "no CUPTI record"."""
    need_root()
    need_ptrace()
    steps, threads = 40, 3
    trace, wl, tr = traced_until_stopped(
        [SIM_TRAIN, "--steps", str(steps), "--kernel-us", "100", "--threads", str(threads),
         "--hold"], {"TPSIM_VERBOSE": "1", "TPSIM_CUPTI_BUF_RECORDS": "8"}, "gpu-ooo.json")
    check_valid_trace(trace)
    dropped, reordered = sim_cupti_line(wl)
    assert dropped == 0 and reordered > 10, (dropped, reordered)
    items = tpsim_items(wl.err.text())
    kernels = {e["args"]["correlation"]: e for e in trace["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") == "kernel"}
    launches = calls(trace, pid=wl.pid, name="cudaLaunchKernel")
    assert len(launches) == 4 * steps * threads, len(launches)
    for l in launches:
        corr = l["args"]["correlation"]
        assert corr in kernels and items[corr]["tid"] == l["tid"], (l, items.get(corr))
        assert kernels[corr]["name"] == l["args"]["kernel"], (l, kernels[corr])
    j = trace["tptrace"]["gpu_join"]
    assert j["unjoined"] == {"before_enable": 0, "after_disable": 0, "no_record": 0, "ambiguous": 0}, j
    assert j["joined"] == j["calls"], j


def test_gpu_clock_drift_fitted():
    """The device clock runs 50 ppm fast and CUPTI's calibration is 250 µs off
    (TPSIM_GPU_CLOCK_PPM=50, TPSIM_GPU_CLOCK_OFFSET_NS=250000): every kernel in the trace starts
    within 1 µs of the sim's true host time (its own log), and the metadata has the drift.
    Without the fit the kernels are 250 µs off and more."""
    need_root()
    need_ptrace()
    steps = 60
    trace, wl, tr = traced_until_stopped(
        [SIM_TRAIN, "--steps", str(steps), "--kernel-us", "10000", "--hold"],
        {"TPSIM_VERBOSE": "1", "TPSIM_GPU_CLOCK_PPM": "50",
         "TPSIM_GPU_CLOCK_OFFSET_NS": "250000"}, "gpu-drift.json")
    items = tpsim_items(wl.err.text())
    kernels = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert len(kernels) == 4 * steps, len(kernels)
    errs = []
    for k in kernels:
        it = items[k["args"]["correlation"]]
        errs.append(abs(abs_ns(trace, k["ts"]) - it["start"]))
    span = max(i["end"] for i in items.values()) - min(i["start"] for i in items.values())
    errs.sort()
    print(f"    {len(errs)} kernels over {span / 1e9:.2f} s: |start - truth| median {errs[len(errs) // 2]} "
          f"ns, max {errs[-1]} ns")
    assert errs[-1] <= 1000, errs[-10:]
    g = trace["tptrace"]["targets"][0]["gpu"]
    assert abs(g["clock_ppm"] - 50) < 2, g
    assert abs(g["clock_offset_ns"] - 250000) < 2000 + 50e-6 * span, g


def test_gpu_kernel_starts_before_its_launch_returns():
    """An idle device starts a kernel about 2 µs after the submission while the launch call
    returns about 4 µs after it (the sim's driver, as a real one): the kernel starts inside its
    launch. The launch is still joined, its arrow drawn to that kernel."""
    need_root()
    need_ptrace()
    steps = 5
    trace, wl, tr = trace_workload(
        [SIM_TRAIN, "--steps", str(steps), "--kernel-us", "300"], tracer_args=["--gpu"],
        env={"TPSIM_VERBOSE": "1"}, out_name="gpu-early.json")
    check_valid_trace(trace)
    kernels = {e["args"]["correlation"]: e for e in trace["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") == "kernel"}
    flows_s = {e["id"]: e for e in trace["traceEvents"] if e.get("ph") == "s"}
    flows_f = {e["id"]: e for e in trace["traceEvents"] if e.get("ph") == "f"}
    inside = 0
    for l in calls(trace, pid=wl.pid, name="cudaLaunchKernel"):
        corr = l["args"]["correlation"]
        k = kernels[corr]
        assert k["name"] == l["args"]["kernel"], (l, k)
        assert corr in flows_s and flows_f[corr]["tid"] == k["tid"], corr
        assert l["ts"] <= k["ts"], (l, k)
        if k["ts"] < l["ts"] + l["dur"]:
            inside += 1
            assert flows_s[corr]["ts"] == l["ts"], (flows_s[corr], l)
    # each step's first fake_gemm (stream A) and its fake_relu (stream B) find their stream
    # idle: the step before ended with a sync that waited for both
    print(f"    {inside} of {4 * steps} kernels start inside their launch")
    assert inside >= 2 * steps, inside
    j = trace["tptrace"]["gpu_join"]
    assert j["unjoined"] == {"before_enable": 0, "after_disable": 0, "no_record": 0, "ambiguous": 0}, j


def incomplete_run(mode, out_name):
    """sim_train with a 120 s kernel (fake_tail) still running when tptrace is stopped: the
    agent's last forced flush hands back the buffer holding its open record, with the API
    records written after it (its own launch's among them)."""
    steps = 3
    env = {"TPSIM_VERBOSE": "1"}
    if mode:
        env["TPSIM_CUPTI_INCOMPLETE"] = mode
    trace, wl, tr = traced_until_stopped(
        [SIM_TRAIN, "--steps", str(steps), "--kernel-us", "300", "--tail-kernel-ms", "120000",
         "--hold"], env, out_name)
    check_valid_trace(trace)
    m = re.search(r"^tpsim: cupti handed back (\d+) incomplete records$", wl.err.text(), re.M)
    assert m and int(m[1]) == 1, wl.err.text()[-2000:]
    g = trace["tptrace"]["targets"][0]["gpu"]
    assert g["records_incomplete"] == 1 and g["buffers_cut"] == 0, g
    assert g["kernels"] == 4 * steps, g
    j = trace["tptrace"]["gpu_join"]
    # every probed call (the tail's launch and copy too) has its API record: none was lost
    # behind the open one in its buffer
    assert j["unjoined"] == {"before_enable": 0, "after_disable": 0, "no_record": 0,
                             "ambiguous": 0}, j
    assert j["joined"] == j["calls"] == 8 * steps + 2, j
    tail = calls(trace, pid=wl.pid, name="cudaLaunchKernel")
    tail = [l for l in tail if l["args"].get("kernel") == "fake_tail"]
    assert len(tail) == 1, tail
    kernels = {e["args"]["correlation"] for e in trace["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") == "kernel"}
    assert tail[0]["args"]["correlation"] not in kernels, tail
    line = (f"tptrace: --gpu: pid {wl.pid}: 1 GPU records came back from CUPTI before their "
            f"work ended (times unknown): left out")
    assert line in tr.err.text().splitlines(), tr.err.text()


def test_gpu_incomplete_records_at_detach():
    """A kernel still running when tptrace stops: CUPTI reserved its record at the launch, so
    the buffer in progress holds it open; the default flush leaves that buffer, the forced one
    hands it back with the record's times 0, and cuptiActivityGetNextRecord says
    CUPTI_ERROR_INVALID_KIND on it ("incomplete or invalid"). The agent steps over it, counts
    it, and reads the records after it; an agent that stops at the first error loses its
    launch's API record (no_record 1)."""
    need_root()
    need_ptrace()
    incomplete_run(None, "gpu-incomplete.json")


def test_gpu_incomplete_records_zero_times():
    """The same, with CUPTI returning the open record as a success with both times 0
    (TPSIM_CUPTI_INCOMPLETE=zero): left out and counted, never drawn at time 0."""
    need_root()
    need_ptrace()
    incomplete_run("zero", "gpu-incomplete-zero.json")
