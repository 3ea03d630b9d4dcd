"""Tier 2: README promises of `tptrace -p` that no other test holds: the _ptsz/_ptds entry points
and "per-thread stream", cudaGraphLaunch, cudaEventRecordWithFlags, --durations,
distributedInfo and process_labels from RANK/WORLD_SIZE, libraries deleted after loading
(/proc/PID/map_files), and the end of a trace without the sched_process_exit tracepoint.
Every API is called once by tests/e2e/progs/api_calls.c, against the real libcudart.so.13
(entry observable, rc 35 without a driver) and against the simulated runtime (the calls work)."""
import os
import shutil
import signal
import time
from lib import (CUDA_LIB, E2E_BIN, SIM_LIB, WL, Tracer, Workload, calls, check_valid_trace,
                 counts, in_syscall, load_trace, need_root, thread_named, tmp_path,
                 trace_workload, wait_blocked)

# the sim runs the graph for 300 ms, the kernels for 1 ms: ev is recorded behind the graph
SIM_ENV = {"TPSIM_KERNEL_US": "300000", "TPSIM_KERNEL_TIMES": "api_kernel=1000"}
PT_KEY = "per-thread stream"
# calls 1..18 of api_calls.c: (event name, per-thread variant in the _pt build, return probe)
CALLS = [
    ("cudaLaunchKernel", True, False),
    ("cudaLaunchCooperativeKernel", True, False),
    ("cudaLaunchKernelExC", True, False),
    ("cudaMemcpy", True, True),
    ("cudaMemcpyAsync", True, False),
    ("cudaMemcpy2D", True, True),
    ("cudaMemcpy2DAsync", True, False),
    ("cudaMemset", True, True),
    ("cudaMemsetAsync", True, False),
    ("cudaMemsetAsync", True, False),
    ("cudaGraphLaunch", True, False),
    ("cudaEventRecord", True, False),
    ("cudaEventRecordWithFlags", True, False),
    ("cudaStreamWaitEvent", True, False),
    ("cudaEventQuery", False, True),
    ("cudaEventSynchronize", False, True),
    ("cudaStreamSynchronize", True, True),
    ("cudaDeviceSynchronize", False, True),
]
I_EVENT_QUERY, I_EVENT_SYNC = 14, 15


def handles(wl):
    line = wl.out.wait_for(lambda l: l.startswith("# handles "), 5)
    assert line, wl.out.text()
    return {k: int(v, 16) for k, v in (kv.split("=") for kv in line.split()[2:])}


def return_codes(wl):
    line = wl.out.wait_for(lambda l: l.startswith("# rc="), 5)
    assert line, wl.out.text()
    return [int(x) for x in line[len("# rc="):].split(",")]


def expected_args(h):
    """The decoded arguments of calls 1..18, from the values the program passed."""
    s, s2, dev, host = hex(h["stream"]), hex(h["stream2"]), hex(h["dev"]), hex(h["host"])
    kernel = {"kernel": "api_kernel"}
    return [
        dict(kernel, grid=[2, 3, 4], block=[32, 2, 1], stream=s, **{"shared memory": 256}),
        dict(kernel, grid=[5, 1, 1], block=[64, 1, 1], stream=s, **{"shared memory": 0}),
        dict(kernel, grid=[6, 1, 1], block=[128, 1, 1], stream=s2, attributes=0,
             **{"shared memory": 512}),
        {"bytes": 4096, "kind": "HtoD", "dst": dev, "src": host, "stream": "0x0"},
        {"bytes": 2048, "kind": "DtoH", "dst": host, "src": dev, "stream": s},
        {"bytes": 192, "kind": "HtoD", "width": 48, "height": 4, "dpitch": 64, "spitch": 128,
         "dst": dev, "src": host, "stream": "0x0"},
        {"bytes": 96, "kind": "DtoH", "width": 32, "height": 3, "dpitch": 128, "spitch": 64,
         "dst": host, "src": dev, "stream": s},
        {"bytes": 1000, "value": 0x11, "ptr": dev, "stream": "0x0"},
        {"bytes": 500, "value": 0x22, "ptr": dev, "stream": s},
        {"bytes": 100, "value": 0x33, "ptr": dev, "stream": "0x2"},   # cudaStreamPerThread
        {"graph": hex(h["graph"]), "stream": s},
        {"event": hex(h["ev"]), "stream": s},
        {"event": hex(h["ev2"]), "stream": s, "flags": 1},      # cudaEventRecordExternal
        {"stream": s2, "event": hex(h["ev2"]), "flags": 0},
        {"event": hex(h["ev"])},
        {"event": hex(h["ev"])},
        {"stream": s},
        {},
    ]


def run_api_calls(binary, out_name, tracer_args=(), env=None):
    trace, wl, tr = trace_workload([os.path.join(E2E_BIN, binary)], tracer_args=tracer_args,
                                   env=env, out_name=out_name)
    check_valid_trace(trace)
    assert trace["tptrace"]["events_dropped"] == 0
    return trace, wl, tr


def check_api_calls(trace, wl, real, per_thread, durations=False):
    """Names, every decoded argument, per-thread marks, return codes and durations."""
    h, rcs = handles(wl), return_codes(wl)
    evs = calls(trace, pid=wl.pid)
    assert [e["name"] for e in evs] == [c[0] for c in CALLS], [e["name"] for e in evs]
    if real:
        assert rcs == [35] * len(CALLS), rcs
    else:
        assert rcs == [600 if i == I_EVENT_QUERY else 0 for i in range(len(CALLS))], rcs
    assert len({e["args"]["correlation"] for e in evs}) == len(CALLS)
    for i, (e, (name, pt_variant, has_ret), want) in enumerate(zip(evs, CALLS, expected_args(h))):
        what = f"call {i + 1} {name}"
        assert e["tid"] == wl.pid, what
        for k, v in want.items():
            assert e["args"].get(k) == v, f"{what}.{k}: got {e['args'].get(k)!r} want {v!r}"
        if per_thread and pt_variant:
            assert e["args"].get(PT_KEY) is True, f"{what}: {e['args']}"
        else:
            assert PT_KEY not in e["args"], f"{what}: {e['args']}"
        if has_ret or durations:
            # the return probe saw exactly what the program got back
            assert e["args"].get("rc") == rcs[i], f"{what}: rc {e['args'].get('rc')} want {rcs[i]}"
            assert e["dur"] > 0, f"{what}: a return probe gives a duration: {e}"
        else:
            assert "rc" not in e["args"] and e["dur"] == 0, f"{what} is entry-only: {e}"
    return evs, h


def test_real_cudart_legacy_stream():
    """The plain entry points of the real runtime: no call is marked per-thread."""
    need_root()
    trace, wl, tr = run_api_calls("api_calls_real", "api_real.json")
    check_api_calls(trace, wl, real=True, per_thread=False)


def test_real_cudart_per_thread_stream():
    """Built with CUDA_API_PER_THREAD_DEFAULT_STREAM (what nvcc --default-stream per-thread
    defines): the calls go to the real runtime's _ptsz/_ptds symbols and come out under the
    plain name with "per-thread stream": true."""
    need_root()
    trace, wl, tr = run_api_calls("api_calls_real_pt", "api_real_pt.json")
    check_api_calls(trace, wl, real=True, per_thread=True)


def sim_semantics(evs):
    # the event sync waited for the 300 ms graph queued before the record; the query did not
    assert evs[I_EVENT_SYNC]["dur"] >= 200e3, evs[I_EVENT_SYNC]
    assert evs[I_EVENT_QUERY]["dur"] < 50e3, evs[I_EVENT_QUERY]
    # and it began after the graph launch, the record and the query were made
    assert evs[I_EVENT_SYNC]["ts"] >= max(e["ts"] for e in evs[:I_EVENT_SYNC])


def test_sim_legacy_and_per_thread_stream():
    need_root()
    for binary, pt in (("api_calls_sim", False), ("api_calls_sim_pt", True)):
        trace, wl, tr = run_api_calls(binary, f"{binary}.json", env=SIM_ENV)
        evs, h = check_api_calls(trace, wl, real=False, per_thread=pt)
        sim_semantics(evs)


def test_durations_real_cudart():
    """--durations puts a return probe on every API: every call has its rc and a duration."""
    need_root()
    plain, _, _ = run_api_calls("api_calls_real_pt", "dur_plain.json")
    trace, wl, tr = run_api_calls("api_calls_real_pt", "dur_real.json", ["--durations"])
    check_api_calls(trace, wl, real=True, per_thread=True, durations=True)
    # one more probe per entry-only symbol of the table the library has
    assert trace["tptrace"]["probes_attached"] > plain["tptrace"]["probes_attached"]


def test_durations_sim():
    need_root()
    trace, wl, tr = run_api_calls("api_calls_sim", "dur_sim.json", ["--durations"], env=SIM_ENV)
    evs, h = check_api_calls(trace, wl, real=False, per_thread=False, durations=True)
    sim_semantics(evs)


def dist_info_text(path):
    with open(path) as f:
        text = f.read()
    start = text.find('"distributedInfo"')
    return text[start:text.find("}", start) + 1] if start >= 0 else None


def labels(trace):
    return {e["pid"]: e["args"]["labels"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "process_labels"}


def sim_train(steps=2):
    return [os.path.join(WL, "sim_train"), "--steps", str(steps), "--kernel-us", "200"]


def test_distributed_info_one_rank():
    """RANK/WORLD_SIZE in the one target's environment: distributedInfo as HTA reads it
    (regex "rank":\\s+(\\d+)), a "rank N" process label, rank and world size in the metadata."""
    need_root()
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}
    trace, wl, tr = trace_workload(sim_train(), env=env, out_name="dist.json")
    check_valid_trace(trace)
    assert trace["distributedInfo"] == {"backend": "unknown", "rank": 3, "world_size": 8}, \
        trace["distributedInfo"]
    assert '"rank": 3,' in dist_info_text(tmp_path("dist.json")), dist_info_text(tmp_path("dist.json"))
    assert labels(trace) == {wl.pid: "rank 3"}, labels(trace)
    t = trace["tptrace"]["targets"][0]
    assert t["rank"] == 3 and t["world_size"] == 8, t
    assert counts(calls(trace, pid=wl.pid))["cudaLaunchKernel"] == 8


def test_distributed_info_nccl_backend():
    """A rank that has libnccl mapped (the real libnccl.so.2): backend "nccl"."""
    need_root()
    env = {"RANK": "2", "WORLD_SIZE": "4"}
    trace, wl, tr = trace_workload([os.path.join(WL, "nccl_real_args")], env=env,
                                   out_name="dist_nccl.json")
    check_valid_trace(trace)
    assert trace["distributedInfo"] == {"backend": "nccl", "rank": 2, "world_size": 4}, \
        trace["distributedInfo"]
    assert labels(trace) == {wl.pid: "rank 2"}, labels(trace)


def test_distributed_info_absent():
    """No RANK: no label, no distributedInfo, no rank in the metadata; two ranks traced
    together: a label each and no distributedInfo (it describes one rank)."""
    need_root()
    # env execs sim_train in the same process, without the variables
    unset = ["env", "-u", "RANK", "-u", "WORLD_SIZE", "-u", "LOCAL_RANK"]
    trace, wl, tr = trace_workload(unset + sim_train(), out_name="nodist.json")
    assert "distributedInfo" not in trace and labels(trace) == {}, labels(trace)
    assert "rank" not in trace["tptrace"]["targets"][0]

    out = tmp_path("dist2.json")
    a = Workload(sim_train(3), env={"RANK": "0", "WORLD_SIZE": "2"})
    b = Workload(sim_train(3), env={"RANK": "1", "WORLD_SIZE": "2"})
    try:
        tr = Tracer(["-p", str(a.pid), "-p", str(b.pid), "-o", out])
        for w in (a, b):
            w.go()
        for w in (a, b):
            w.wait_done()
            w.finish()
        assert tr.wait(30) == 0, tr.err.text()
    finally:
        a.kill()
        b.kill()
    trace = load_trace(out)
    check_valid_trace(trace)
    assert "distributedInfo" not in trace
    assert labels(trace) == {a.pid: "rank 0", b.pid: "rank 1"}, labels(trace)
    assert [(t["pid"], t["rank"], t["world_size"]) for t in trace["tptrace"]["targets"]] == \
        [(a.pid, 0, 2), (b.pid, 1, 2)]


def test_distributed_info_rank_without_world_size():
    """RANK set, WORLD_SIZE not: the world size is unknown and must be written as unknown
    (null), never as a number (tptrace once wrote -1)."""
    need_root()
    trace, wl, tr = trace_workload(sim_train(), env={"RANK": "5"}, out_name="dist_nows.json")
    check_valid_trace(trace)
    assert labels(trace) == {wl.pid: "rank 5"}, labels(trace)
    dist = trace["distributedInfo"]
    assert dist["rank"] == 5 and dist["backend"] == "unknown", dist
    assert dist["world_size"] is None, dist


def deleted_lib_case(src, name, rc):
    """dlopen_app maps a copy of the runtime, the copy is deleted, and only then tptrace
    attaches: it must open the library through /proc/PID/map_files and trace its calls."""
    need_root()
    d = tmp_path(f"deleted-{name}")
    os.makedirs(d, exist_ok=True)
    copy = os.path.join(d, "libcudart.so.13")
    shutil.copyfile(src, copy)
    out = tmp_path(f"deleted-{name}.json")
    iters = 3
    wl = Workload([os.path.join(WL, "dlopen_app"), "--lib", copy, "--iters", str(iters),
                   "--wait-line"])
    try:
        wl.go()
        assert wl.out.wait_for(lambda l: l == "# loaded", 10), wl.out.text()
        os.unlink(copy)
        with open(f"/proc/{wl.pid}/maps") as f:
            assert f"{copy} (deleted)" in f.read()
        tr = Tracer(["-p", str(wl.pid), "-o", out])
        # attached ("tracing"): only now does the app make its calls
        wl.go()
        wl.wait_done()
        wl.finish()
        assert tr.wait(30) == 0, tr.err.text()
    finally:
        wl.kill()
    trace = load_trace(out)
    check_valid_trace(trace)
    t = trace["tptrace"]["targets"][0]
    assert t["cuda_runtimes"] == [copy], t
    assert t["attach_errors"] == 0 and t["probes_attached"] > 20, t
    evs = calls(trace, pid=wl.pid)
    assert counts(evs) == {"cudaLaunchKernel": iters, "cudaStreamSynchronize": iters,
                           "cudaDeviceSynchronize": 1}, counts(evs)
    for e in evs:
        if e["name"] == "cudaLaunchKernel":
            assert e["args"]["kernel"] == "dl_kernel" and e["args"]["grid"] == [7, 1, 1], e
        else:
            assert e["args"]["rc"] == rc, e


def test_deleted_library_sim():
    deleted_lib_case(os.path.join(SIM_LIB, "libcudart.so.13"), "sim", 0)


def test_deleted_library_real():
    deleted_lib_case(os.path.realpath(os.path.join(CUDA_LIB, "libcudart.so.13")), "real", 35)


# the product's switch to the path of kernels without a BTF sched_process_exit (user/core/session.c)
NO_EXIT_TP = {"TPTRACE_NO_EXIT_TP": "1"}


def check_exit_unknown(t):
    """An exit code would be invented: the tracepoint that reads it was not there."""
    assert t["exited"] is True and "killed_by_signal" not in t, t
    assert "exit_code" in t and t["exit_code"] is None, f"unknown exit status not null: {t}"
    assert t.get("exit_code_unknown") == "no exit tracepoint in this kernel", t


def test_no_exit_tracepoint_exit():
    """Without the sched_process_exit tracepoint the pidfd still says the target is gone: the
    trace ends by itself, valid and complete, and the exit status is unknown."""
    need_root()
    trace, wl, tr = trace_workload(sim_train(), out_name="noexit.json", tracer_env=NO_EXIT_TP)
    check_valid_trace(trace)
    assert wl.p.returncode == 0
    assert f"tptrace: pid {wl.pid} (sim_train) exited" in tr.err.text().splitlines()
    c = counts(calls(trace, pid=wl.pid))
    assert c["cudaLaunchKernel"] == 8 and c["cudaDeviceSynchronize"] == 1, c
    check_exit_unknown(trace["tptrace"]["targets"][0])


def test_no_exit_tracepoint_killed():
    """The same for a target killed inside a blocking sync: the call still ends (unfinished)
    when the process was seen gone, the signal is unknown."""
    need_root()
    out = tmp_path("noexit-killed.json")
    wl = Workload([os.path.join(WL, "sim_train"), "--steps", "1", "--kernel-us", "60000000"])
    try:
        tr = Tracer(["-p", str(wl.pid), "-o", out], env=NO_EXIT_TP)
        wl.go()
        worker = thread_named(wl.pid, "train-w0")
        streams = [int(t) for t in os.listdir(f"/proc/{wl.pid}/task")
                   if int(t) not in (wl.pid, worker)]
        wait_blocked(wl.pid, worker, "futex",
                     also=lambda: any(in_syscall(wl.pid, t, "clock_nanosleep") for t in streams))
        killed = time.time()
        os.kill(wl.pid, signal.SIGKILL)
        assert tr.wait(20) == 0, tr.err.text()
        ended = time.time()
    finally:
        wl.kill()
    trace = load_trace(out)
    check_valid_trace(trace)
    evs = calls(trace, pid=wl.pid)
    unfinished = [e for e in evs if e["args"].get("unfinished")]
    assert [e["name"] for e in unfinished] == ["cudaStreamSynchronize"], unfinished
    # it ends when the process was seen gone: after the kill, before the tracer ended (1 ms:
    # the trace's clock against time.time())
    end_wall = trace["baseTimeNanoseconds"] / 1e9 + (unfinished[0]["ts"] + unfinished[0]["dur"]) / 1e6
    assert killed - 0.001 <= end_wall <= ended + 0.001, (killed, end_wall, ended)
    assert trace["tptrace"]["unfinished_calls"] == 1
    check_exit_unknown(trace["tptrace"]["targets"][0])


def test_duration_counts_from_tracing():
    """-d SEC is SEC seconds of tracing after everything is attached: reading a 500 MiB
    libtorch's symbols took 3 s of `--torch -d 2`, which then traced for 20 ms. A test hook
    holds the attach 1.5 s; the trace (duration_s, attach to end, on the tracer's clock)
    then lasts the hold plus the 2 s asked for, by construction."""
    need_root()
    out = tmp_path("duration-hold.json")
    wl = Workload([os.path.join(WL, "sim_train"), "--steps", "100000", "--kernel-us", "200"])
    try:
        tr = Tracer(["-p", str(wl.pid), "-d", "2", "-o", out], ready=False,
                    env={"TPTRACE_TEST_ATTACH_HOLD_MS": "1500"})
        wl.go()
        assert tr.wait() == 0, tr.err.text()
    finally:
        wl.kill()
    t = load_trace(out)
    assert t["tptrace"]["duration_s"] >= 3.5, t["tptrace"]["duration_s"]
