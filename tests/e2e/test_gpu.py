"""CUPTI agent on the simulated stack (tests/sim/cupti + tests/sim/cudart): inject the agent into
a running workload with ptrace, collect CUPTI activity through shared memory, write it with
gpu_trace, unload the agent. Driven by .output/e2e/gpu_attach (user/gpu/gpu.c) until tptrace has
--gpu. Every kernel/copy/wait the sim executed (TPSIM_VERBOSE=1) must be in the trace with its
own correlation id, stream and times."""
import os
import time

from gpulib import (AGENT_SO, GpuAttach, agent_mapped, abs_ns, gpu_events, maps_mention, need_ptrace,
                    normalize_output, tpsim_items)
from lib import WL, Skip, Workload, need_root, run_tptrace, tmp_path, wait_in_syscall, wait_until

SIM_TRAIN = os.path.join(WL, "sim_train")
NOCUDA = os.path.join(WL, "nocuda")
CUDART_UNINIT = os.path.join(WL, "cudart_uninit")
# CUPTI's timestamps come from the agent's CLOCK_MONOTONIC callback; the sim maps its own
# CLOCK_MONOTONIC times through that callback (offset of two consecutive clock reads), so a
# record may differ from the sim's time by that read pair: well under 20 µs unless preempted.
ALIGN_NS = 20_000
ALIGN_MAX_NS = 10_000_000    # one preemption between the sim's two reads (2.02 ms seen in a full run)
CLOCK_RESIDUAL_NS = 50_000   # |cuptiGetTimestamp - CLOCK_MONOTONIC| per sample


def train_argv(steps, kernel_us, threads=1):
    return [SIM_TRAIN, "--steps", str(steps), "--kernel-us", str(kernel_us), "--threads",
            str(threads), "--hold"]


def run_attached(steps=8, kernel_us=1000, threads=1, attach_after_go=False, extra=(), env=None,
                 name="gpu.json"):
    """sim_train with the agent attached over its whole run (or from mid-run); returns
    (workload, attach, stats, trace, tpsim items). The workload is still alive (--hold)."""
    e = {"TPSIM_VERBOSE": "1"}
    e.update(env or {})
    wl = Workload(train_argv(steps, kernel_us, threads), env=e)
    ga = None
    try:
        if attach_after_go:
            wl.go()
            # mid-run: attach once the job has run a few kernels (the sim says each one)
            wait_until(lambda: sum(i["kind"] == "kernel" for i in tpsim_items(wl.err.text()).values()) >= 4,
                       120, "the job's first kernels")
        ga = GpuAttach(wl.pid, name, extra)
        assert ga.attached(), f"attach failed: {ga.stderr.text()}"
        assert agent_mapped(wl.pid), "agent mapped while attached"
        if not attach_after_go:
            wl.go()
        wl.wait_done()
        rc = ga.stop()
        assert rc == 0, f"gpu_attach rc={rc}: {ga.stderr.text()}"
        return wl, ga, ga.stats(), ga.trace(), tpsim_items(wl.err.text())
    except BaseException:
        wl.kill()
        if ga and ga.p.poll() is None:
            ga.p.kill()
        raise


def check_records_match_sim(trace, items, complete=True):
    """Every sim kernel/copy/wait is in the trace with its correlation, stream and times."""
    want = {c: it for c, it in items.items() if it["kind"] in ("kernel", "memcpy", "wait_event")}
    got = {}
    for e in gpu_events(trace):
        corr = e["args"]["correlation"]
        assert corr not in got, f"correlation {corr} twice: {e} {got.get(corr)}"
        got[corr] = e
    if complete:
        assert set(got) == set(want), (sorted(set(want) - set(got)), sorted(set(got) - set(want)))
    else:
        assert set(got) <= set(want), sorted(set(got) - set(want))
        assert got, "no records at all"
    errs = []
    for corr, e in got.items():
        it = want[corr]
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "wait_event": "cuda_sync"}[it["kind"]]
        assert e["cat"] == cat, (e, it)
        assert e["pid"] == it["dev"] and e["tid"] == it["stream"], (e, it)
        assert e["args"]["stream"] == it["stream"] and e["args"]["device"] == it["dev"]
        start = abs_ns(trace, e["ts"])
        end = abs_ns(trace, e["ts"] + e["dur"])
        errs.append(max(abs(start - it["start"]), abs(end - it["end"])))
        # durations are exact: both ends go through the same offset (the sim's device clock
        # does not drift by default, and tptrace fits no drift it cannot tell from jitter)
        assert abs((end - start) - (it["end"] - it["start"])) <= 2, (e, it)
        if it["kind"] == "kernel":
            assert e["name"] == it["name"], (e, it)
            assert e["args"]["grid"] == [int(x) for x in it["grid"].split(",")], (e, it)
            assert e["args"]["block"] == [int(x) for x in it["block"].split(",")], (e, it)
            assert e["args"]["shared memory"] == int(it["shmem"]), (e, it)
        elif it["kind"] == "memcpy":
            assert e["args"]["bytes"] == int(it["bytes"]), (e, it)
            host = it["host"].capitalize()
            want_name = {"HtoD": f"Memcpy HtoD ({host} -> Device)",
                         "DtoH": f"Memcpy DtoH (Device -> {host})"}[it["dir"]]
            assert e["name"] == want_name, (e, it)
        else:
            assert e["name"] == "Stream Wait Event", e
    errs.sort()
    assert errs[len(errs) // 2] <= ALIGN_NS and errs[-1] <= ALIGN_MAX_NS, \
        f"GPU times vs sim: median {errs[len(errs) // 2]} ns, max {errs[-1]} ns"
    return errs


def test_gpu_attach_sim_train():
    need_ptrace()
    steps, kernel_us = 8, 1000
    wl, ga, st, trace, items = run_attached(steps, kernel_us)
    try:
        check_valid_trace_gpu(trace)
        errs = check_records_match_sim(trace, items)
        kernels = gpu_events(trace, "kernel")
        assert len(kernels) == 4 * steps
        assert sorted({e["name"] for e in kernels}) == ["fake_gemm", "fake_relu"]
        assert len(gpu_events(trace, "gpu_memcpy")) == 2 * steps
        assert len(gpu_events(trace, "cuda_sync")) == steps
        gemm = [e for e in kernels if e["name"] == "fake_gemm"]
        relu = [e for e in kernels if e["name"] == "fake_relu"]
        # the sim's device clock: every kernel lasts exactly its time, however busy the host
        # (exact times are also compared with the sim's own report above)
        durs = sorted(e["dur"] for e in gemm)
        assert durs == [kernel_us] * len(gemm), durs
        stream_a, stream_b = gemm[0]["tid"], relu[0]["tid"]
        assert stream_a != stream_b and {e["tid"] for e in gemm} == {stream_a}
        # tracks: one GPU process, a named thread per stream
        meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
        assert {"name": "GPU 0"} in [e["args"] for e in meta if e["name"] == "process_name"]
        assert [e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"] == [5000000]
        names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
        assert names == {stream_a: f"stream {stream_a}", stream_b: f"stream {stream_b}"}, names
        # streams listed in stream order, whatever order their first records came in
        sorts = {e["tid"]: e["args"]["sort_index"] for e in meta
                 if e["name"] == "thread_sort_index" and e["pid"] == 0}
        assert sorts == {stream_a: stream_a, stream_b: stream_b}, sorts
        # stats: nothing lost, clock checked, CUPTI found next to the sim libcudart
        assert st["dropped_ring"] == 0 and st["dropped_cupti"] == 0, st
        assert st["kernels"] == 4 * steps and st["syncs"] == steps, st
        # API records as real CUPTI writes them: one RUNTIME record per runtime call (10 a step
        # and the final cudaDeviceSynchronize); one DRIVER record per driver call: the one under
        # each runtime call, each kernel's lazy load at its first launch (cuLibraryLoadData +
        # cuLibraryGetKernel) and the worker thread's context (cuDevicePrimaryCtxRetain +
        # cuCtxSetCurrent) at its first call
        assert st["runtime_api"] == 10 * steps + 1, st
        assert st["driver_api"] == 10 * steps + 1 + 2 * 2 + 2, st
        assert st["clock_samples"] >= 2 and st["clock_residual_ns"] <= CLOCK_RESIDUAL_NS, st
        assert os.path.realpath(st["cupti_path"]) == os.path.realpath(
            os.path.join(os.path.dirname(SIM_TRAIN), "..", "sim", "lib", "libcupti.so.13")), st
        assert st["injected"] and st["unloaded"], st
        assert not agent_mapped(wl.pid), "agent unmapped after detach"
        print(f"    clock residual {st['clock_residual_ns']} ns (sample window "
              f"{st['clock_window_ns']} ns); record vs sim: median {errs[len(errs) // 2]} ns, "
              f"max {errs[-1]} ns")
        # the target keeps running and ends normally
        assert wl.p.poll() is None
        assert wl.finish() == 0
    finally:
        wl.kill()


def check_valid_trace_gpu(trace):
    """What Perfetto/HTA need of GPU events (lib.check_valid_trace also wants tptrace meta)."""
    for e in trace["traceEvents"]:
        for k in ("ph", "name", "pid", "tid"):
            assert k in e, e
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
            assert e["args"]["stream"] >= 0 and "correlation" in e["args"], e
    # X slices on one GPU stream must not overlap (a stream runs one item at a time)
    by_track = {}
    for e in gpu_events(trace):
        by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    for evs in by_track.values():
        evs.sort(key=lambda e: e["ts"])
        for a, b in zip(evs, evs[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 0.002, (a, b)


def test_gpu_output_unchanged_by_agent():
    need_ptrace()
    argv = train_argv(6, 500, 2)
    plain = Workload(argv)
    plain.go()
    plain.wait_done()
    rc_plain = plain.finish()
    wl, ga, st, trace, items = run_attached(6, 500, threads=2, env={"TPSIM_VERBOSE": "0"},
                                            name="gpu_out.json")
    try:
        rc = wl.finish()
        assert rc == rc_plain == 0
        assert normalize_output(wl.out.text()) == normalize_output(plain.out.text()), \
            (wl.out.text(), plain.out.text())
        assert wl.err.text() == plain.err.text() == "", (wl.err.text(), plain.err.text())
        assert st["kernels"] == 4 * 6 * 2, st
    finally:
        wl.kill()
        plain.kill()


def test_gpu_attach_mid_run_threads():
    """Attach while 3 threads launch work and main blocks in pthread_join (a futex wait that
    the injection must restart): the workload finishes normally, records are a subset."""
    need_ptrace()
    wl, ga, st, trace, items = run_attached(40, 500, threads=3, attach_after_go=True,
                                            name="gpu_mid.json")
    try:
        check_records_match_sim(trace, items, complete=False)
        assert st["unloaded"] and not agent_mapped(wl.pid)
        assert "eventquery_not_ready" in wl.out.text()
        assert wl.finish() == 0 and "tptrace" not in wl.err.text()
    finally:
        wl.kill()


def test_gpu_file_transport():
    """Agent and control block through <target root>/dev/shm (other pid namespace / uid)."""
    need_ptrace()
    before = set(os.listdir("/dev/shm"))
    wl, ga, st, trace, items = run_attached(4, 500, extra=["--files"], name="gpu_files.json")
    try:
        check_records_match_sim(trace, items)
        assert st["unloaded"] and not agent_mapped(wl.pid)
        left = {f for f in set(os.listdir("/dev/shm")) - before if f.startswith("tptrace")}
        assert not left, f"files left in /dev/shm: {left}"
        assert wl.finish() == 0
    finally:
        wl.kill()


def refused(argv, extra, env=None, want_rc=3):
    wl = Workload(argv + ["--hold"], env=env)
    try:
        ga = GpuAttach(wl.pid, "gpu_refused.json", extra)
        rc = ga.wait(60)
        err = ga.stderr.text()
        assert rc == want_rc, (rc, err, ga.stdout.text())
        assert not ga.attached(0.1)
        assert not agent_mapped(wl.pid), "agent unloaded after refusing"
        assert not os.path.exists(ga.out)
        # the target is unharmed
        wl.go()
        wl.wait_done()
        assert wl.finish() == 0, wl.err.text()
        return err
    finally:
        wl.kill()


def test_gpu_refuses_process_without_cuda():
    need_ptrace()
    # tptrace's own check: nothing injected
    err = refused([NOCUDA], [])
    assert "uses no CUDA" in err and "libcudart" in err, err
    # the agent's check, after injection: refuses, unloaded again
    err = refused([NOCUDA], ["--no-precheck"])
    assert "GPU agent in process" in err and "refused" in err and "uses no CUDA" in err, err


def test_gpu_refuses_second_subscriber():
    need_ptrace()
    err = refused([SIM_TRAIN, "--steps", "2"], [], env={"TPSIM_CUPTI_OTHER_SUBSCRIBER": "1"})
    assert "another CUPTI client is active" in err, err


def test_gpu_refuses_without_cupti():
    need_ptrace()
    err = refused([SIM_TRAIN, "--steps", "2"], ["--cupti", "/nonexistent/libcupti.so.13"])
    assert "no libcupti found" in err and "/nonexistent/libcupti.so.13" in err, err


def test_gpu_resident_agent():
    """CUDA_INJECTION64_PATH mode (emulated with LD_PRELOAD + TPTRACE_AGENT_AUTOSTART=1, which
    calls InitializeInjection like the driver would): idle until attached, records while
    attached, idle again after; stays loaded; a second session works."""
    need_ptrace()
    env = {"LD_PRELOAD": AGENT_SO, "TPTRACE_AGENT_AUTOSTART": "1", "TPSIM_VERBOSE": "1"}
    wl = Workload(train_argv(600, 500), env=env)
    try:
        shm = f"/dev/shm/tptrace-gpu.{wl.pid}"
        assert os.path.exists(shm), shm
        assert not maps_mention(wl.pid, "libcupti"), "CUPTI loaded lazily, at first attach"
        for i in range(2):
            ga = GpuAttach(wl.pid, f"gpu_res{i}.json")
            assert ga.attached(), ga.stderr.text()
            if i == 0:
                wl.go()
            # some kernels while attached (the sim says each one), then stop
            n0 = sum(it["kind"] == "kernel" for it in tpsim_items(wl.err.text()).values())
            wait_until(lambda: sum(it["kind"] == "kernel" for it in tpsim_items(wl.err.text()).values())
                       >= n0 + 8, 120, "kernels while attached")
            assert ga.stop() == 0, ga.stderr.text()
            st = ga.stats()
            assert not st["injected"] and not st["unloaded"], st
            assert st["kernels"] > 0, st
            check_records_match_sim(ga.trace(), tpsim_items(wl.err.text()), complete=False)
            assert agent_mapped(wl.pid), "resident agent stays"
        wl.wait_done(120)
        assert wl.finish() == 0
    finally:
        wl.kill()
        try:
            os.unlink(f"/dev/shm/tptrace-gpu.{wl.pid}")
        except OSError:
            pass


def test_gpu_long_kernel_names():
    """Names longer than the record's inline 127 chars arrive in continuation records and are
    joined and demangled whole."""
    need_ptrace()
    reps = 3
    wl = Workload([os.path.join(WL, "gpu_names"), "--reps", str(reps), "--hold"])
    try:
        info = dict(l[2:].split("=", 1) for l in wl.out.lines if l.startswith("# "))
        assert len(info["long"]) > 3 * 127, len(info["long"])
        ga = GpuAttach(wl.pid, "gpu_names.json")
        assert ga.attached(), ga.stderr.text()
        wl.go()
        wl.wait_done()
        assert ga.stop() == 0, ga.stderr.text()
        names = [e["name"] for e in gpu_events(ga.trace(), "kernel")]
        want_long = ("ns::deep<" + ", ".join(f"outer::very_long_type_name_for_testing<{i}>"
                                             for i in range(1, 31)) + " >::kernel(float*, int)")
        assert names == [want_long, "scale(float*, float, int)"] * reps, names
        st = ga.stats()
        assert st["kernels"] == 2 * reps and st["dropped_ring"] == 0, st
        assert wl.finish() == 0
    finally:
        wl.kill()


def test_gpu_ring_full_drops_counted():
    """A ring too small for one flush: the agent never blocks, drops whole records, counts them;
    what arrives is intact and delivered + dropped = produced."""
    need_ptrace()
    steps = 10
    wl, ga, st, trace, items = run_attached(steps, 300, extra=["--ring", "128"],
                                            name="gpu_small.json")
    try:
        # activity + runtime API + driver API records (see test_gpu_attach_sim_train)
        produced = steps * (4 + 2 + 1) + (10 * steps + 1) + (10 * steps + 1 + 2 * 2 + 2)
        assert st["dropped_ring"] > 0, st
        assert st["records"] + st["dropped_ring"] == produced, (st, produced)
        check_records_match_sim(trace, items, complete=False)
        assert wl.finish() == 0
    finally:
        wl.kill()


def test_gpu_injection_during_nanosleep():
    """Inject while the only thread sleeps in nanosleep (restarted through restart_syscall
    after the injection): the sleep still lasts its full time, the process ends normally."""
    need_ptrace()
    work_ms = 1500
    wl = Workload([NOCUDA, "--work-ms", str(work_ms)])
    try:
        t0 = time.monotonic()
        wl.go()
        wait_in_syscall(wl.pid, "clock_nanosleep")     # inject into the sleep itself
        ga = GpuAttach(wl.pid, "gpu_sleep.json", ["--no-precheck"])
        assert ga.wait(60) == 3 and "uses no CUDA" in ga.stderr.text(), ga.stderr.text()
        wl.wait_done(30)
        elapsed = time.monotonic() - t0
        assert elapsed >= work_ms / 1000, elapsed
        assert wl.finish() == 0 and wl.err.text() == "", wl.err.text()
    finally:
        wl.kill()


def test_gpu_real_cupti_without_driver():
    """The real CUDA 13 libcupti.so.13 resolves every entry point the agent uses; without a
    driver cuptiSubscribe fails, and the agent says so, unloads, and leaves the target alone."""
    need_ptrace()
    real = "/usr/local/cuda/lib/libcupti.so.13"
    if not os.path.exists(real):
        raise Skip(f"{real} not installed")
    if os.path.exists("/usr/lib/x86_64-linux-gnu/libcuda.so.1"):
        raise Skip("a CUDA driver is installed: covered by tests/gpu/check.sh instead")
    err = refused([SIM_TRAIN, "--steps", "2"], ["--cupti", real])
    assert "GPU agent in process" in err and "failed: cuptiSubscribe failed" in err, err


# ---- refusals before and after touching the process (user/gpu/gpu.c gpu__precheck) ----------

def maps_text(pid):
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


def objects(maps):
    """Mapped object paths in maps order, once each, without [heap]/[stack]/... pseudo-paths."""
    out = []
    for line in maps.splitlines():
        f = line.split(None, 5)
        if len(f) == 6 and not f[5].startswith("[") and f[5] not in out:
            out.append(f[5])
    return out


def tptrace_gpu(pid, extra=()):
    """tptrace -p PID --gpu -d 1: (rc, its 'tptrace:' stderr lines)."""
    rc, _, err = run_tptrace(["-p", str(pid), "--gpu", "-d", "1", "-o",
                              tmp_path("gpu-refusal.json")] + list(extra))
    return rc, [l for l in err.splitlines() if l.startswith("tptrace:")]


def gpu_attach_refused(pid, extra=()):
    """.output/e2e/gpu_attach (gpu__attach directly): its error line; it must have refused."""
    ga = GpuAttach(pid, "gpu-refusal-ga.json", extra)
    rc = ga.wait(60)
    assert rc == 3 and not ga.attached(0.1), (rc, ga.stderr.text())
    return ga.stderr.text().strip()


def test_gpu_refuses_without_driver_process_untouched():
    """No libcuda.so.1 mapped (no CUDA at all; or libcudart loaded but CUDA not initialised,
    when the runtime has not dlopened the driver yet): refused before anything is done, one
    line saying why and what to do, /proc/PID/maps byte for byte as before. Once the process
    has initialised CUDA, the same attach works."""
    need_root()
    need_ptrace()
    wl = Workload([NOCUDA, "--hold"])
    try:
        before = maps_text(wl.pid)
        why = (f"process {wl.pid} uses no CUDA (no libcudart.so* or libcuda.so.1 in "
               f"/proc/{wl.pid}/maps): no GPU activity to trace; nothing was done to the process")
        assert tptrace_gpu(wl.pid) == (1, [f"tptrace: --gpu: pid {wl.pid}: {why}"])
        assert gpu_attach_refused(wl.pid) == "gpu_attach: " + why
        assert maps_text(wl.pid) == before
    finally:
        wl.kill()
    wl = Workload([CUDART_UNINIT, "--hold"])
    try:
        before = maps_text(wl.pid)
        names = [os.path.basename(o) for o in objects(before)]
        assert "libcudart.so.13" in names and "libcuda.so.1" not in names, names
        why = (f"process {wl.pid} has not initialised CUDA (libcudart.so is loaded, libcuda.so.1 "
               f"is not in /proc/{wl.pid}/maps) and CUPTI needs the driver: attach after its "
               "first CUDA call; nothing was done to the process")
        assert tptrace_gpu(wl.pid) == (1, [f"tptrace: --gpu: pid {wl.pid}: {why}"])
        assert gpu_attach_refused(wl.pid) == "gpu_attach: " + why
        assert maps_text(wl.pid) == before
        # what the line says to do works: after the first CUDA call, attach
        wl.go()
        wl.wait_done()
        assert "libcuda.so.1" in [os.path.basename(o) for o in objects(maps_text(wl.pid))]
        ga = GpuAttach(wl.pid, "gpu-after-init.json")
        assert ga.attached(), ga.stderr.text()
        assert ga.stop() == 0, ga.stderr.text()
        assert not agent_mapped(wl.pid)
    finally:
        wl.kill()


def test_gpu_failed_attach_says_what_stays_mapped():
    """A refusal after the agent was loaded names exactly the objects left mapped in the target
    that were not there before (here the sim's libcupti.so.13, which the agent loaded before
    CUPTI refused a second subscriber), or says that nothing stays (no libcupti found)."""
    need_root()
    need_ptrace()
    wl = Workload([SIM_TRAIN, "--steps", "2", "--hold"], env={"TPSIM_CUPTI_OTHER_SUBSCRIBER": "1"})
    try:
        before = maps_text(wl.pid)
        rc, lines = tptrace_gpu(wl.pid)
        new = [o for o in objects(maps_text(wl.pid)) if o not in objects(before)]
        assert [os.path.basename(o) for o in new] == ["libcupti.so.13"], new
        assert rc == 1 and len(lines) == 1 and "another CUPTI client is active" in lines[0], lines
        assert lines[0].endswith("; left mapped in the process (not there before): " + new[0]), lines
        # a second attempt finds libcupti already there: nothing new stays
        before = maps_text(wl.pid)
        line = gpu_attach_refused(wl.pid)
        assert objects(maps_text(wl.pid)) == objects(before)
        assert "another CUPTI client is active" in line and line.endswith(
            f"; nothing stays mapped in process {wl.pid} that was not there before"), line
    finally:
        wl.kill()
    wl = Workload([SIM_TRAIN, "--steps", "2", "--hold"])
    try:
        before = maps_text(wl.pid)
        rc, lines = tptrace_gpu(wl.pid, ["--cupti", "/nonexistent/libcupti.so.13"])
        assert rc == 1 and len(lines) == 1, lines
        assert "no libcupti found" in lines[0] and lines[0].endswith(
            f"; nothing stays mapped in process {wl.pid} that was not there before"), lines
        assert objects(maps_text(wl.pid)) == objects(before)
    finally:
        wl.kill()
