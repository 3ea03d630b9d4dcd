"""Tier 2: libraries loaded after attach, targets that exit or die mid-trace, several pids,
a process in another mount namespace, and the ways a trace ends (-d, SIGINT, SIGTERM)."""
import os
import re
import shutil
import signal
import time
from lib import (CUDA_LIB, SIM_LIB, WL, Tracer, Workload, calls, check_valid_trace, counts,
                 ctxt_switches, in_syscall, load_trace, need_root, thread_named, tmp_path,
                 trace_workload, wait_blocked, wait_until)


def dlopen_case(lib, iters, name, rc):
    need_root()
    argv = [os.path.join(WL, "dlopen_app"), "--lib", lib, "--iters", str(iters), "--wait-line"]

    def attached(wl, tr):
        """the app loaded the runtime and waits; it calls once tptrace says it traces it"""
        assert wl.out.wait_for(lambda l: l == "# loaded", 30), wl.out.text()
        assert tr.err.wait_for(lambda l: l == f"tptrace: pid {wl.pid} loaded a CUDA runtime; "
                               "tracing", 30), tr.err.text()
        wl.go()
    # no CUDA at attach time: --wait, then the dynamic linker's notice brings the probes in
    # (-v: the line that says which path attached them)
    trace, wl, tr = trace_workload(argv, tracer_args=["--wait", "-v"], out_name=name,
                                   after_go=attached)
    check_valid_trace(trace)
    evs = calls(trace, pid=wl.pid)
    c = counts(evs)
    assert c == {"cudaLaunchKernel": iters, "cudaStreamSynchronize": iters,
                 "cudaDeviceSynchronize": 1}, c
    for e in evs:
        if e["name"] == "cudaLaunchKernel":
            assert e["args"]["kernel"] == "dl_kernel"
            assert e["args"]["grid"] == [7, 1, 1] and e["args"]["block"] == [32, 1, 1]
        else:   # the syncs have return probes: each returned rc
            assert e["args"]["rc"] == rc, e
    target = trace["tptrace"]["targets"][0]
    assert target["cuda_runtimes"] == [os.path.realpath(lib)]
    # stderr, line by line: one probe (_dl_debug_state) at attach, the runtime's when it loads
    out = tmp_path(name)
    lines = tr.err.text().splitlines()
    want_head = [f"tptrace: waiting for pid {wl.pid} (dlopen_app) to load a CUDA runtime",
                 f"tptrace: pid {wl.pid} (dlopen_app): 1 probes in 0 CUDA runtime(s)",
                 f"tptrace: tracing 1 process to {out}; Ctrl-C to stop"]
    # the dlopen notice attaches them (said with -v), or (rarely) the periodic rescan gets
    # there first (said by nothing else); either way the start of tracing is said once
    started = f"tptrace: pid {wl.pid} loaded a CUDA runtime; tracing"
    # the runtime dlopens libcuda.so.1 at its first call (the real one does too, with a
    # driver): a second notice brings the driver's probes in, and the calls made after it
    # show as driver calls nested in runtime calls (how many depends on how soon that is)
    nested = trace["tptrace"]["nested_driver_calls"]
    want_tail = [f"tptrace: pid {wl.pid} (dlopen_app) exited",
                 re.compile(rf"tptrace: wrote {re.escape(out)}: \d+\.\d s of pid {wl.pid} \(dlopen_app\): "
                            rf"{2 * iters + 1} CUDA/NCCL calls \({iters} launches\), 0 events dropped$")]
    # -v adds its detail line after the summary
    assert lines[-1].startswith("tptrace: ") and " launches named, " in lines[-1], lines
    lines = lines[:-1]
    assert lines[:3] == want_head and lines[-2] == want_tail[0] and \
        want_tail[1].match(lines[-1]), lines
    # in between: the start of tracing, said once, and one notice per load the dynamic
    # linker reported in time (the runtime's, the driver's), together all probes but
    # _dl_debug_state's; the periodic rescan says nothing
    middle = lines[3:-2]
    assert middle.count(started) == 1, lines
    new_code = [re.fullmatch(rf"tptrace: pid {wl.pid} loaded new code: (\d+) probes attached", l)
                for l in middle if l != started]
    assert all(new_code) and len(new_code) <= 2, lines
    assert sum(int(m.group(1)) for m in new_code) <= target["probes_attached"] - 1, lines
    if rc == 35:    # the real runtime without a driver: nothing more loads
        assert nested == 0 and len(new_code) <= 1, lines


def test_dlopen_after_attach_sim():
    dlopen_case(os.path.join(SIM_LIB, "libcudart.so.13"), 5, "dlopen_sim.json", 0)


def test_dlopen_after_attach_real():
    dlopen_case(os.path.join(CUDA_LIB, "libcudart.so.13"), 3, "dlopen_real.json", 35)


def blocked_in_sync(out, tracer_args=()):
    """sim_train with 60 s kernels: one step is 9 async calls (microseconds) and then
    cudaStreamSynchronize(B), which blocks behind 3 minutes of queued GPU work. Returns the
    workload, the tracer and the wall time (time.time()) by which the worker was seen inside
    that sync: asleep in a futex for good while a stream runs a kernel."""
    wl = Workload([os.path.join(WL, "sim_train"), "--steps", "1", "--kernel-us", "60000000"])
    tr = Tracer(["-p", str(wl.pid), "-o", out] + list(tracer_args))
    wl.go()
    worker = thread_named(wl.pid, "train-w0")
    streams = [int(t) for t in os.listdir(f"/proc/{wl.pid}/task")
               if int(t) not in (wl.pid, worker)]
    wait_blocked(wl.pid, worker, "futex",
                 also=lambda: any(in_syscall(wl.pid, t, "clock_nanosleep") for t in streams))
    return wl, tr, time.time()


def check_unfinished_sync(trace, wl, min_dur_us):
    """The worker's step is complete except for the sync it was blocked in, shown unfinished."""
    evs = calls(trace, pid=wl.pid)
    assert counts(evs) == {"cudaLaunchKernel": 4, "cudaMemcpyAsync": 2, "cudaEventRecord": 1,
                           "cudaStreamWaitEvent": 1, "cudaEventQuery": 1,
                           "cudaStreamSynchronize": 1}, counts(evs)
    unfinished = [e for e in evs if "unfinished" in e["args"]]
    assert len(unfinished) == 1, unfinished
    sync = unfinished[0]
    relu = [e for e in evs if e["args"].get("kernel") == "fake_relu"]
    assert sync["name"] == "cudaStreamSynchronize" and sync["args"]["unfinished"] is True, sync
    assert len(relu) == 1 and sync["args"]["stream"] == relu[0]["args"]["stream"], (sync, relu)
    assert sync["tid"] == relu[0]["tid"] != wl.pid, "the worker thread, not main"
    assert "rc" not in sync["args"], "no return was seen"
    assert sync["dur"] >= min_dur_us - 1000, (sync, min_dur_us)   # 1 ms: the two clocks' step
    # the sync began after every other call of the step and is the last thing on its thread
    assert sync["ts"] >= max(e["ts"] for e in evs if e is not sync), sync
    assert [e["args"]["rc"] for e in evs if e["name"] == "cudaEventQuery"] == [600]
    assert trace["tptrace"]["unfinished_calls"] == 1
    return sync


def test_target_killed_mid_trace():
    """A thread blocked in a sync when its process is killed: shown inside that call, until
    the process died, marked unfinished; the exit tracepoint gives the killing signal."""
    need_root()
    out = tmp_path("killed.json")
    wl, tr, blocked = blocked_in_sync(out)
    try:
        # the tracer is stopped while the process dies: it can only notice afterwards, so an
        # end at the death is told apart from one at the noticing by construction
        os.kill(tr.p.pid, signal.SIGSTOP)
        before = time.time()
        os.kill(wl.pid, signal.SIGKILL)
        wl.p.wait()
        reaped = time.time()
        os.kill(tr.p.pid, signal.SIGCONT)
        rc = tr.wait(20)  # ends by itself: every target is gone
    finally:
        if tr.p.poll() is None:
            os.kill(tr.p.pid, signal.SIGCONT)
        wl.kill()
    assert rc == 0, tr.err.text()
    assert f"tptrace: pid {wl.pid} (sim_train) exited" in tr.err.text().splitlines(), tr.err.text()
    trace = load_trace(out)
    check_valid_trace(trace)
    sync = check_unfinished_sync(trace, wl, (before - blocked) * 1e6)
    # it ends when the process died (between the kill and the reaping), not when the tracer
    # noticed (after SIGCONT); 1 ms for the trace's clock against time.time()
    end_wall = trace["baseTimeNanoseconds"] / 1e9 + (sync["ts"] + sync["dur"]) / 1e6
    assert before - 0.001 <= end_wall <= reaped + 0.001, (before, end_wall, reaped)
    target = trace["tptrace"]["targets"][0]
    assert target["exited"] is True and target["killed_by_signal"] == 9, target
    assert "exit_code" not in target, target


def test_trace_ends_while_blocked():
    """-d expires while the target is blocked in a sync: the call is written unfinished, up to
    the end of the trace, and the target keeps running."""
    need_root()
    out = tmp_path("blocked.json")
    wl, tr, blocked = blocked_in_sync(out, ["-d", "1.5"])
    try:
        rc = tr.wait(20)
        assert wl.p.poll() is None, "the target must survive the detach"
    finally:
        wl.kill()
    assert rc == 0, tr.err.text()
    trace = load_trace(out)
    check_valid_trace(trace)
    sync = check_unfinished_sync(trace, wl, 0)
    # it ends with the trace (its start + duration_s), not later
    meta = trace["tptrace"]
    end_ns = trace["baseTimeNanoseconds"] + (sync["ts"] + sync["dur"]) * 1e3
    trace_end_ns = meta["start_unix_ns"] + meta["duration_s"] * 1e9
    assert abs(end_ns - trace_end_ns) <= 1e6, (end_ns, trace_end_ns, meta)
    target = trace["tptrace"]["targets"][0]
    assert target["exited"] is False and "exit_code" not in target, target


def test_several_pids():
    need_root()
    out = tmp_path("two.json")
    a = Workload([os.path.join(WL, "sim_train"), "--steps", "3", "--kernel-us", "500"])
    b = Workload([os.path.join(WL, "sim_train"), "--steps", "5", "--kernel-us", "500"])
    try:
        tr = Tracer(["-p", str(a.pid), "-p", str(b.pid), "-o", out])
        a.go()
        b.go()
        a.wait_done()
        b.wait_done()
        a.finish()
        b.finish()
        assert tr.wait(30) == 0, tr.err.text()
    finally:
        a.kill()
        b.kill()
    trace = load_trace(out)
    check_valid_trace(trace)
    for wl, steps in ((a, 3), (b, 5)):
        c = counts(calls(trace, pid=wl.pid))
        assert c["cudaLaunchKernel"] == 4 * steps and c["cudaStreamSynchronize"] == steps, c
    procs = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {a.pid, b.pid}
    assert "distributedInfo" not in trace


def test_mount_namespace():
    """The runtime lives on a tmpfs mounted only inside the target's mount namespace."""
    need_root()
    if not shutil.which("unshare"):
        raise AssertionError("unshare missing (util-linux)")
    nsdir = tmp_path("nsroot")
    os.makedirs(nsdir, exist_ok=True)
    script = (f"mount -t tmpfs tpns {nsdir} && cp {SIM_LIB}/libcudart.so.13 {nsdir}/ && "
              f"mount -t tmpfs hide {SIM_LIB} && "
              f"exec env LD_LIBRARY_PATH={nsdir} {WL}/sim_train --steps 2 --kernel-us 500")
    trace, wl, tr = trace_workload(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                                   out_name="ns.json")
    assert not os.path.exists(os.path.join(nsdir, "libcudart.so.13")), "tmpfs must be private"
    assert trace["tptrace"]["targets"][0]["cuda_runtimes"] == [f"{nsdir}/libcudart.so.13"]
    c = counts(calls(trace, pid=wl.pid))
    assert c["cudaLaunchKernel"] == 8 and c["cudaStreamSynchronize"] == 2, c


def test_duration_and_signals():
    need_root()
    wl = Workload([os.path.join(WL, "sim_train"), "--steps", "100000", "--kernel-us", "1000"])
    try:
        wl.go()
        worker = thread_named(wl.pid, "train-w0")
        for how in ("duration", signal.SIGINT, signal.SIGTERM):
            out = tmp_path(f"end-{how}.json.gz")
            t0 = time.time()
            if how == "duration":
                tr = Tracer(["-p", str(wl.pid), "-o", out, "-d", "1"])
                rc = tr.wait(60)    # ends by itself; not before its duration (a lower bound)
                assert time.time() - t0 >= 0.9
            else:
                tr = Tracer(["-p", str(wl.pid), "-o", out])
                # traced steps happened: the worker blocked in a sync twice since the attach
                c0 = ctxt_switches(wl.pid, worker)
                wait_until(lambda: ctxt_switches(wl.pid, worker) >= c0 + 2, 30,
                           "the worker to run two steps")
                rc = tr.stop(how)
            assert rc == 0, (how, tr.err.text())
            trace = load_trace(out)
            check_valid_trace(trace)
            # what a window holds is checked where the worker's progress inside it is known
            # (the signal cases wait for two of its steps); a 1 s -d window on a loaded host
            # held no launch once (the worker not scheduled in it)
            if how != "duration":
                assert counts(calls(trace, pid=wl.pid)).get("cudaLaunchKernel", 0) > 0
            assert trace["tptrace"]["targets"][0]["exited"] is False
        # the target keeps running after every detach
        assert wl.p.poll() is None
    finally:
        wl.kill()


def test_ring_overflow_counted_and_reported():
    """A reader that falls behind loses records: they are counted, reported on stderr and in
    the trace metadata, and the trace stays valid."""
    need_root()
    out = tmp_path("overflow.json")
    # 5,000 steps of 10 calls: far more records than a 1 MiB ring holds, all made while the
    # reader is stopped (from before GO to after DONE), so the ring overflows by construction
    wl = Workload([os.path.join(WL, "sim_train"), "--steps", "5000", "--kernel-us", "1"])
    tr = None
    try:
        tr = Tracer(["-p", str(wl.pid), "-o", out, "--ring-mb", "1"])
        os.kill(tr.p.pid, signal.SIGSTOP)   # the reader stalls; the probes keep firing
        wl.go()
        wl.wait_done(300)
        os.kill(tr.p.pid, signal.SIGCONT)
        assert tr.stop() == 0, tr.err.text()
    finally:
        if tr and tr.p.poll() is None:
            os.kill(tr.p.pid, signal.SIGCONT)
        wl.kill()
    trace = load_trace(out)
    check_valid_trace(trace)
    dropped = trace["tptrace"]["events_dropped"]
    assert dropped > 0, trace["tptrace"]
    assert f"tptrace: {dropped} events dropped (ring buffer full); raise --ring-mb" in tr.err.text(), \
        tr.err.text()
    assert trace["tptrace"]["events_recorded"] > 1000
