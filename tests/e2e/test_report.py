"""Tier 2: `tptrace report` on traces tptrace itself made of simulated jobs with known faults
(tests/workloads/sim_job.c, nccl_rank.c --slow-us on the simulated stack). Each finding is
asserted with its numbers; the healthy job gets none; bad input gets one line.

Each job is traced once per module run (cached): the jobs take 1-5 s each."""
import gzip
import json
import os
import shutil
import subprocess
from gpulib import need_ptrace
from lib import (ROOT, SIM_LIB, TPTRACE, WL, Tracer, Workload, load_trace, need_root,
                 tmp_path, trace_workload)
from ncclib import Job, trace_ranks_gpu

SIM_JOB = os.path.join(WL, "sim_job")
STEPS = 12
# 1 ms kernels: the sim's dispatch gaps (tens of us on a loaded host) stay a small share
HEALTHY = ["--kernel-us", "1000"]
_traces = {}


def job_trace(name, args, gpu=True, extra=()):
    """Trace sim_job ARGS once; returns the trace path."""
    if name in _traces:
        return _traces[name]
    need_root()
    if gpu:
        need_ptrace()
    tracer = (["--gpu"] if gpu else []) + list(extra)
    trace_workload([SIM_JOB, "--steps", str(STEPS)] + list(args), tracer_args=tracer,
                   out_name=f"report-{name}.json")
    _traces[name] = tmp_path(f"report-{name}.json")
    return _traces[name]


def report(paths, *extra, rc_want=0):
    p = subprocess.run([TPTRACE, "report"] + list(paths) + list(extra), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == rc_want, (p.returncode, p.stdout[-2000:], p.stderr)
    return p


def report_json(paths):
    return json.loads(report(paths, "--json").stdout)


def findings(r, fid=None):
    return [f for f in r["findings"] if fid is None or f["id"] == fid]


def one(r, fid):
    f = findings(r, fid)
    assert len(f) == 1, (fid, [x["title"] for x in r["findings"]])
    return f[0]


def steps_of(r):
    assert len(r["steps"]["per_rank"]) == 1, r["steps"]
    return r["steps"]["per_rank"][0]["steps"]


def check_steps(r, method="syncs"):
    """STEPS steps on the thread, minus the first (what precedes the first step end is no
    step): each with wall = busy + idle, the step's launches and its one sync"""
    assert r["steps"]["method"] == method, r["steps"]
    st = steps_of(r)
    assert len(st) == STEPS - 1, r["steps"]
    for s in st:
        assert s["syncs"] == 1, s
        if s["gpu_busy_ns"] is not None:
            assert s["gpu_busy_ns"] + s["gpu_idle_ns"] == s["wall_ns"], s
    return st


def test_report_healthy_job_has_no_finding():
    """pipelined loop (the host waits on the previous step's event): the GPU never runs dry"""
    r = report_json([job_trace("healthy", HEALTHY)])
    assert r["findings"] == [], [f["title"] for f in r["findings"]]
    st = check_steps(r)
    assert all(s["launches"] == 4 for s in st), st
    for s in st:
        assert s["compute_ns"] + s["copy_ns"] <= s["wall_ns"], s    # one stream
    # per step, the GPU time by kind is the trace's own kernels and copies clipped to the
    # step (recomputed here from the raw events; the sim's durations vary with the host load)
    trace = load_trace(job_trace("healthy", HEALTHY))
    base = trace["tptrace"]["base_mono_ns"]
    items = [(e["cat"], base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000))
             for e in trace["traceEvents"]
             if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")]
    for s in st:
        a, b = s["start_ns"], s["start_ns"] + s["wall_ns"]
        want = {c: sum(max(0, min(y, b) - max(x, a)) for k, x, y in items if k == c)
                for c in ("kernel", "gpu_memcpy")}
        assert abs(s["compute_ns"] - want["kernel"]) <= 8, (s, want)
        assert abs(s["copy_ns"] - want["gpu_memcpy"]) <= 4, (s, want)
    assert sum(s["compute_ns"] for s in st) >= 3.9e6 * len(st), st    # 4 x 1 ms
    top = r["kernels"]["top"]
    assert [k["name"] for k in top] == ["fake_step"] and top[0]["count"] == 4 * STEPS, top
    assert 1e6 <= top[0]["p50_ns"] <= 1.1e6 and top[0]["share"] == 1, top
    assert r["kernels"]["launch"]["count"] == 4 * (STEPS - 1), r["kernels"]["launch"]
    assert [c["what"] for c in r["cannot_judge"]] == \
        ["memory peak and out-of-memory allocations"], r["cannot_judge"]
    util = r["timeline"]["utilization"]
    assert len(util) == 1 and util[0]["device"] == 0 and len(util[0]["busy_frac"]) == 100
    assert sum(util[0]["busy_frac"]) / 100 > 0.8, util


def test_report_host_sync_every_step():
    """`loss.item()` every step (DtoH copy + cudaStreamSynchronize) and 400 us of host work
    after it: the GPU idles ~400 us per step, after each sync"""
    path = job_trace("sync", ["--sync", "step", "--host-us", "400"])
    r = report_json([path])
    check_steps(r)
    steps = STEPS - 1
    idle = one(r, "gpu_idle")["numbers"]
    assert idle["idle_frac"] > 0.2, idle
    assert idle["idle_after_sync_ns"] > 0.8 * idle["idle_ns"], idle
    # at least the 400 us of host work a step; at most what the trace itself shows, whatever
    # the host's load stretched: each gap after a sync (the window's: every sync but the
    # last) lies between the sync's return and the next GPU work's start (the GPU went idle
    # no later than the sync returned) and between the GPU work before it and that start
    t = load_trace(path)
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    gpu = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                 key=lambda e: e["ts"])
    syncs = sorted((e for e in ev if e["name"] == "cudaStreamSynchronize"), key=lambda e: e["ts"])
    lo = hi = 0.0
    for sy in syncs[:-1]:
        end = sy["ts"] + sy["dur"]
        nxt = next(g["ts"] for g in gpu if g["ts"] >= end)
        prev = max(g["ts"] + g["dur"] for g in gpu if g["ts"] + g["dur"] <= end)
        lo += nxt - end
        hi += nxt - prev
    assert 400e3 * steps <= idle["idle_after_sync_ns"], idle
    assert lo * 1000 - steps <= idle["idle_after_sync_ns"] <= hi * 1000 + steps, (lo, hi, idle)
    hs = one(r, "host_sync")
    n = hs["numbers"]
    assert n["syncs"] == steps and n["syncs_per_step"] == 1 and n["gaps_after_sync"] == steps, n
    assert n["gpu_idle_after_sync_ns"] == idle["idle_after_sync_ns"], (n, idle)
    assert hs["severity"] in ("medium", "high"), hs
    assert all(e["name"] == "cudaStreamSynchronize" for e in hs["evidence"]), hs["evidence"]
    d = one(r, "blocking_dtoh")["numbers"]
    assert d["copies"] == steps and d["per_step"] == 1 and d["bytes"] == 4 * steps, d
    assert {f["id"] for f in r["findings"]} == {"gpu_idle", "host_sync", "blocking_dtoh"}


def test_report_tiny_kernels():
    """40 kernels of 2 us per step"""
    r = report_json([job_trace("tiny", ["--kernels", "40", "--kernel-us", "2"])])
    check_steps(r)
    n = one(r, "tiny_kernels")["numbers"]
    assert n["kernels"] == 40 * STEPS and n["threshold_ns"] == 10000, n
    # the sim's kernels last 2 us on its device clock, whatever the host's load
    assert n["tiny_kernels"] == n["kernels"] and n["tiny_mean_ns"] == 2000, n
    assert n["tiny_count_frac"] == n["tiny_kernels"] / n["kernels"], n
    assert r["kernels"]["top"][0]["count"] == 40 * STEPS


def test_report_pageable_copies():
    """4 MiB HtoD from malloc'ed memory each step: the sim copies pageable memory at a
    quarter of its 10 GB/s. After each blocking copy the GPU waits until the host, woken,
    launches again (~0.15 ms quiet; 0.3 ms seen with the machine at load 300, which with
    4 x 1 ms kernels was 5.6 % of the step, over the host_sync finding's 5 %: a true finding
    for that run). 16 x 1 ms kernels a step keep that wake-up far below 5 % on a loaded
    machine, so the only finding is the one this job is made for"""
    r = report_json([job_trace("pageable", ["--copy", "pageable", "--copy-bytes", "4194304",
                                            "--kernel-us", "1000", "--kernels", "16"])])
    check_steps(r)
    n = one(r, "pageable_copies")["numbers"]
    assert n["pageable_copies"] == STEPS and n["pageable_bytes"] == 4194304 * STEPS, n
    assert 2.2 <= n["pageable_gbps"] <= 2.6, n
    assert n["pinned_copies"] == 0 and n["pinned_gbps"] is None and n["pinned_gbps_unknown"]
    # the finding this job is made for comes first; a host the load kept from waking after
    # each blocking copy may add host_sync: a true finding of that run; nothing else may appear
    ids = [f["id"] for f in r["findings"]]
    assert ids[0] == "pageable_copies" and set(ids) <= {"pageable_copies", "host_sync"}, \
        r["findings"]
    # host_sync exactly when its documented threshold is met: >= 5 % of the time idle after
    # syncs (the README's "Findings")
    if "host_sync" in ids:
        n = one(r, "host_sync")["numbers"]
        assert n["gpu_idle_after_sync_frac"] >= 0.05 and n["gaps_after_sync"] == STEPS - 1, n


def test_report_without_gpu_says_what_it_cannot_judge():
    """the host-sync job traced without --gpu: steps and syncs are known, GPU idle is not"""
    r = report_json([job_trace("sync-nogpu", ["--sync", "step", "--host-us", "400"], gpu=False)])
    st = check_steps(r)
    for s in st:
        for k in ("gpu_busy_ns", "gpu_idle_ns", "compute_ns", "comm_ns", "copy_ns", "memset_ns"):
            assert s[k] is None and s[k + "_unknown"] == "no --gpu data in the trace", s
    whats = [c["what"] for c in r["cannot_judge"]]
    for w in ("GPU idle time and its causes (launch-bound, host syncs, data)",
              "whether host syncs leave the GPU idle", "tiny kernels and the kernel breakdown",
              "pageable vs pinned copies and their bandwidth",
              "NCCL time and its overlap with compute", "straggler ranks (collective wait)",
              "memory peak and out-of-memory allocations", "CPU time per launch"):
        assert w in whats, whats
    # nothing that needs the GPU timeline is claimed; the blocking .item() copies are host facts
    assert [f["id"] for f in r["findings"]] == ["blocking_dtoh"], r["findings"]
    assert r["kernels"]["top"] == [] and r["kernels"]["launch"]["cpu_ns_mean"] is None
    assert r["inputs"][0]["gpu"] is False


def test_report_straggler_rank():
    """3 ranks, rank 2 spends 3 ms more on the host per step: ranks 0 and 1 wait for it in
    the allreduce, each trace made by its own `tptrace --gpu`"""
    need_root()
    need_ptrace()
    steps, slow_us = 8, 3000
    job = Job(3, steps=steps, culprit=2, name="report-straggler",
              extra=["--kernels", "2", "--compute-us", "300", "--slow-us", str(slow_us)])
    outs = trace_ranks_gpu(job, "report-straggler")
    r = report_json(outs)
    assert sorted(i["rank"] for i in r["inputs"]) == [0, 1, 2], r["inputs"]
    s = one(r, "straggler_rank")
    n = s["numbers"]
    assert n["rank"] == 2 and n["ranks"] == 3, n
    # every step the others wait ~3 ms for rank 2 (in each of the step's first collective)
    assert 0.6 * slow_us * 1e3 * (steps - 1) <= n["others_collective_wait_ns_median"] \
        <= 1.5 * slow_us * 1e3 * steps, n
    assert n["collective_wait_ns"] < 0.25 * n["others_collective_wait_ns_median"], n
    waits = {k["rank"]: k["collective_wait_ns"] for k in r["ranks"]}
    assert waits[2] == n["collective_wait_ns"] and min(waits[0], waits[1]) > 4 * waits[2], waits
    assert len(r["steps"]["per_rank"]) == 3
    # the compute is queued on the stream passed to NCCL, before the collective, and NCCL's
    # kernel on its own stream waits for it (an event): nothing overlaps (test_nccl_sim has
    # compute on another stream), and the waiting ranks' NCCL kernels are most of their time
    comm = {f["numbers"]["rank"]: f["numbers"] for f in findings(r, "comm_not_overlapped")}
    assert {0, 1} <= set(comm), [f["title"] for f in r["findings"]]
    for k in (0, 1):
        c = comm[k]
        assert c["comm_overlapped_ns"] == 0 and c["overlap_frac"] == 0, c
        assert c["comm_exposed_ns"] == c["comm_ns"] and c["comm_frac"] > 0.2, c


def test_report_terminal_fits_100_columns():
    paths = [job_trace("sync", ["--sync", "step", "--host-us", "400"]),
             job_trace("tiny", ["--kernels", "40", "--kernel-us", "2"]),
             job_trace("sync-nogpu", ["--sync", "step", "--host-us", "400"], gpu=False)]
    for p in paths:
        out = report([p]).stdout
        long = [l for l in out.splitlines() if len(l) > 100]
        assert not long, long
    out = report([paths[0]]).stdout
    assert "Findings (3)" in out and "[high] GPU idle" in out and "Fix: " in out, out
    assert "Steps (syncs)" in out and "Top kernels by GPU time" in out, out


def test_report_bad_inputs_one_line():
    """missing file, empty file, not JSON, truncated gzip, another tool's trace, a trace with
    no events, trailing garbage: exit 1, one line naming the file, nothing on stdout"""
    need_root()
    good = job_trace("healthy", HEALTHY)
    d = tmp_path("report-bad")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cases = {}
    cases["missing"] = (os.path.join(d, "nope.json"), "cannot open: No such file or directory")
    p = os.path.join(d, "empty.json")
    open(p, "w").close()
    cases["empty file"] = (p, "empty file: not a tptrace trace")
    p = os.path.join(d, "text.json")
    with open(p, "w") as f:
        f.write("hello, this is not a trace\n")
    cases["text"] = (p, "not a JSON object (not a trace) at byte 0")
    p = os.path.join(d, "trunc.json.gz")
    with open(good, "rb") as f:
        blob = gzip.compress(f.read())
    with open(p, "wb") as f:
        f.write(blob[:len(blob) // 2])
    cases["truncated gzip"] = (p, "truncated compressed input")
    p = os.path.join(d, "kineto.json")
    with open(p, "w") as f:
        json.dump({"schemaVersion": 1, "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2,
             "args": {"stream": 7, "correlation": 1}}]}, f)
    cases["other tool"] = (p, "no \"tptrace\" metadata: a trace made by another tool")
    p = os.path.join(d, "cut.json")
    with open(good) as f:
        text = f.read()
    with open(p, "w") as f:
        f.write(text[:len(text) * 2 // 3])
    cases["truncated json"] = (p, "unexpected end of input")
    p = os.path.join(d, "garbage.json")
    with open(p, "w") as f:
        f.write(text + "xyz")
    cases["garbage"] = (p, "data after the trace object")
    # a real trace of a job that made no call while traced
    p = os.path.join(d, "noevents.json")
    wl = Workload([SIM_JOB])
    try:
        t = Tracer(["-p", str(wl.pid), "-d", "1", "-o", p])
        assert t.wait(30) == 0, t.err.text()
    finally:
        wl.kill()
    cases["no events"] = (p, "no CUDA, NCCL or GPU events recorded (")
    for what, (path, msg) in cases.items():
        r = report([path], rc_want=1)
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"tptrace report: {path}: ") and \
            msg in lines[0], (what, r.stderr)
        assert r.stdout == "", (what, r.stdout)
    # one bad input among good ones still fails, naming it
    r = report([good, cases["text"][0]], rc_want=1)
    assert r.stderr.count("\n") == 1 and cases["text"][0] in r.stderr, r.stderr
    r = report([], rc_want=2)
    assert "no trace given" in r.stderr


def test_report_json_and_gzip_agree():
    """a .json.gz reads the same as the .json"""
    good = job_trace("healthy", HEALTHY)
    gz = tmp_path("report-healthy.json.gz")
    with open(good, "rb") as f, gzip.open(gz, "wb") as g:
        g.write(f.read())
    a, b = report_json([good]), report_json([gz])
    b["inputs"][0]["path"] = a["inputs"][0]["path"]
    assert a == b


def test_report_step_python_function():
    """--step train_step on a --py-stacks trace: each python_function slice of train_step is a
    step; the findings' evidence names the Python line"""
    need_root()
    steps = 10
    trace, wl, tr = trace_workload(
        ["/usr/bin/python3", os.path.join(ROOT, "tests", "workloads", "py_train.py"),
         os.path.join(SIM_LIB, "libcudart.so.13"), str(steps)],
        tracer_args=["--py-stacks"], out_name="report-pytrain.json")
    path = tmp_path("report-pytrain.json")
    r = json.loads(report([path], "--json", "--step", "train_step").stdout)
    assert r["steps"]["method"] == "python:train_step", r["steps"]
    assert r["inputs"][0]["py_stacks"] is True
    st = steps_of(r)
    assert len(st) == steps, r["steps"]
    slices = sorted((e for e in trace["traceEvents"] if e.get("cat") == "python_function"
                     and e["name"].endswith(": train_step")), key=lambda e: e["ts"])
    base = trace["tptrace"]["base_mono_ns"]
    for s, e in zip(st, slices):
        assert s["start_ns"] == base + round(e["ts"] * 1000), (s, e)
        assert abs(s["wall_ns"] - round(e["dur"] * 1000)) <= 1, (s, e)
        assert s["syncs"] == 1 and s["launches"] == 0, s
    # a name no slice has: no steps, and said why
    r = json.loads(report([path], "--json", "--step", "no_such_fn").stdout)
    assert r["steps"]["method"] == "python:no_such_fn" and steps_of(r) == [], r["steps"]
    assert "no python_function slice named no_such_fn" in r["steps"]["method_detail"]


def test_report_oom_with_mem():
    """alloc_app's OOM scenario traced with --mem under a 64 MiB device limit: two failed
    cudaMalloc (48 MiB, then 32 MiB)"""
    need_root()
    trace_workload([os.path.join(WL, "alloc_app"), "--scenario", "oom"], tracer_args=["--mem"],
                   env={"TPSIM_MEM_LIMIT_BYTES": str(64 << 20)}, out_name="report-oom.json")
    r = report_json([tmp_path("report-oom.json")])
    assert r["inputs"][0]["mem"] is True and r["inputs"][0]["gpu"] is False
    f = one(r, "oom")
    n = f["numbers"]
    assert n["ooms"] == 2 and n["first_request_bytes"] == 48 << 20, n
    assert n["peak_reserved_bytes"] == 48 << 20 and n["peak_allocated_bytes"] == 48 << 20, n
    assert n["rank"] is None and n["rank_unknown"], n
    assert f["severity"] == "high" and [e["name"] for e in f["evidence"]] == ["OOM"], f
    assert "memory peak and out-of-memory allocations" not in \
        [c["what"] for c in r["cannot_judge"]], r["cannot_judge"]


def test_report_launch_bound():
    """20 us kernels, each launched after 200 us of host work: the GPU waits for launches"""
    r = report_json([job_trace("launch", ["--kernels", "10", "--kernel-us", "20",
                                          "--launch-gap-us", "200"])])
    check_steps(r)
    idle = one(r, "gpu_idle")["numbers"]
    assert idle["idle_frac"] > 0.5 and idle["idle_launch_bound_ns"] > 0.8 * idle["idle_ns"], idle
    n = one(r, "launch_bound")["numbers"]
    assert n["launches"] == 10 * (STEPS - 1), n
    assert n["gpu_idle_launch_bound_ns"] == idle["idle_launch_bound_ns"], (n, idle)
    # at most one launch per 200 us sleep
    assert n["launches_per_s"] <= 5000 and n["cpu_ns_per_launch"] is not None, n
    assert 15000 <= n["kernel_ns_mean"] <= 60000, n


def test_report_memory_peak():
    """alloc_app's fragment scenario traced with --mem: 32 x 16 MiB blocks, 24 of them freed
    (cached), then 2 x 20 MiB that fit no cached block: 552 MiB reserved at the peak, 168 MiB
    of it allocated. The packed scenario makes the same segments and keeps every block: the
    same peak, all of it used, no finding."""
    need_root()
    mib = 1 << 20
    trace_workload([os.path.join(WL, "alloc_app"), "--scenario", "fragment"],
                   tracer_args=["--mem"], out_name="report-fragment.json")
    r = report_json([tmp_path("report-fragment.json")])
    f = one(r, "memory_peak")
    n = f["numbers"]
    assert n["device"] == 0 and n["peak_reserved_bytes"] == 552 * mib, n
    # the reserved counter moves before the block that needed the segment is counted as
    # allocated: at the peak, allocated is the most it reaches while reserved stays there
    assert n["peak_allocated_bytes"] == 512 * mib and n["allocated_at_peak_bytes"] == 168 * mib \
        and n["unused_at_peak_bytes"] == 384 * mib, n
    assert f["severity"] == "high", f  # 384 / 552 of the reserved memory
    assert "552.0 MiB reserved on cuda:0 with 384.0 MiB of it unused" in f["title"], f
    assert "expandable_segments" in f["fix"], f
    (ev,) = f["evidence"]
    assert ev["name"] == "reserved 552.0 MiB, at most 168.0 MiB allocated while it stays there" \
        and ev["ts_ns"] > 0 and ev["dur_ns"] == 0, ev
    text = report([tmp_path("report-fragment.json")]).stdout
    assert "memory peak 552.0 MiB reserved on cuda:0" in text, text
    # an instant without a thread: neither "(0 ns)" nor "tid 0"
    assert "       - reserved 552.0 MiB, at most 168.0 MiB allocated while it stays there\n" \
        in text, text
    # a trace of memory events only is still a process, without steps
    (pr,) = r["steps"]["per_rank"]
    assert pr["steps"] == [] and "memory events only" in r["steps"]["method_detail"], r["steps"]
    trace_workload([os.path.join(WL, "alloc_app"), "--scenario", "packed"],
                   tracer_args=["--mem"], out_name="report-packed.json")
    counters = [e for e in load_trace(tmp_path("report-packed.json"))["traceEvents"]
                if e.get("ph") == "C" and e["name"] == "bytes reserved (cuda:0)"]
    assert max(e["args"]["bytes"] for e in counters) == 552 * mib, counters
    r = report_json([tmp_path("report-packed.json")])
    assert not findings(r, "memory_peak"), [x["title"] for x in r["findings"]]
    assert "memory peak and out-of-memory allocations" not in \
        [c["what"] for c in r["cannot_judge"]], r["cannot_judge"]
