"""Tier 2: libraries loaded after attach, targets that exit or die mid-trace, several pids,
a process in another mount namespace, and the ways a trace ends (-d, SIGINT, SIGTERM)."""
import os
import shutil
import signal
import time
from lib import (CUDA_LIB, SIM_LIB, WL, Tracer, Workload, calls, check_valid_trace, counts,
                 load_trace, need_root, tmp_path, trace_workload)


def dlopen_case(lib, iters, name):
    need_root()
    argv = [os.path.join(WL, "dlopen_app"), "--lib", lib, "--iters", str(iters)]
    # no CUDA at attach time: --wait, then the dynamic linker's notice brings the probes in
    trace, wl, tr = trace_workload(argv, tracer_args=["--wait"], out_name=name)
    check_valid_trace(trace)
    evs = calls(trace, pid=wl.pid)
    c = counts(evs)
    assert c == {"cudaLaunchKernel": iters, "cudaStreamSynchronize": iters,
                 "cudaDeviceSynchronize": 1}, c
    for e in evs:
        if e["name"] == "cudaLaunchKernel":
            assert e["args"]["kernel"] == "dl_kernel"
            assert e["args"]["grid"] == [7, 1, 1] and e["args"]["block"] == [32, 1, 1]
    assert trace["tptrace"]["targets"][0]["cuda_runtimes"] == [os.path.realpath(lib)]
    assert "loaded a CUDA runtime" in tr.err.text() or "pid" in tr.err.text()
    return evs


def test_dlopen_after_attach_sim():
    evs = dlopen_case(os.path.join(SIM_LIB, "libcudart.so.13"), 5, "dlopen_sim.json")
    assert all(e["args"]["rc"] == 0 for e in evs if "rc" in e["args"])


def test_dlopen_after_attach_real():
    evs = dlopen_case(os.path.join(CUDA_LIB, "libcudart.so.13"), 3, "dlopen_real.json")
    assert all(e["args"]["rc"] == 35 for e in evs if "rc" in e["args"])


def test_target_killed_mid_trace():
    need_root()
    out = tmp_path("killed.json")
    wl = Workload([os.path.join(WL, "sim_train"), "--steps", "100000", "--kernel-us", "3000"])
    tr = Tracer(["-p", str(wl.pid), "-o", out])
    wl.go()
    time.sleep(0.6)
    os.kill(wl.pid, signal.SIGKILL)
    wl.kill()
    rc = tr.wait(20)  # ends by itself: every target is gone
    assert rc == 0, tr.err.text()
    assert f"pid {wl.pid} (sim_train) exited" in tr.err.text()
    trace = load_trace(out)
    check_valid_trace(trace)
    evs = calls(trace, pid=wl.pid)
    assert counts(evs).get("cudaLaunchKernel", 0) >= 8, counts(evs)
    assert trace["tptrace"]["targets"][0]["exited"] is True
    # a thread blocked in a sync when the process died is shown inside it, marked unfinished
    unfinished = [e for e in evs if e["args"].get("unfinished")]
    assert all(e["name"] in ("cudaStreamSynchronize", "cudaEventQuery", "cudaDeviceSynchronize")
               for e in unfinished), unfinished
    assert trace["tptrace"]["unfinished_calls"] == len(unfinished)


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
        for how in ("duration", signal.SIGINT, signal.SIGTERM):
            out = tmp_path(f"end-{how}.json.gz")
            t0 = time.time()
            if how == "duration":
                tr = Tracer(["-p", str(wl.pid), "-o", out, "-d", "1"])
                rc = tr.wait(20)
                assert 0.9 <= time.time() - t0 <= 10
            else:
                tr = Tracer(["-p", str(wl.pid), "-o", out])
                time.sleep(0.8)
                rc = tr.stop(how)
            assert rc == 0, (how, tr.err.text())
            trace = load_trace(out)
            check_valid_trace(trace)
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
    wl = Workload([os.path.join(WL, "sim_train"), "--steps", "1000000", "--kernel-us", "1"])
    try:
        tr = Tracer(["-p", str(wl.pid), "-o", out, "--ring-mb", "1"])
        wl.go()
        time.sleep(0.3)
        os.kill(tr.p.pid, signal.SIGSTOP)   # the reader stalls; the probes keep firing
        time.sleep(2.0)
        os.kill(tr.p.pid, signal.SIGCONT)
        time.sleep(0.3)
        assert tr.stop() == 0, tr.err.text()
    finally:
        wl.kill()
    trace = load_trace(out)
    check_valid_trace(trace)
    dropped = trace["tptrace"]["events_dropped"]
    assert dropped > 0, trace["tptrace"]
    assert f"tptrace: {dropped} events dropped (ring buffer full); raise --ring-mb" in tr.err.text(), \
        tr.err.text()
    assert trace["tptrace"]["events_recorded"] > 1000
