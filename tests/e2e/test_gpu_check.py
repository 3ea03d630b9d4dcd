"""Smoke: tests/gpu/check.sh, the GPU machine's script, on a machine without a GPU. It must end
within seconds with a FAIL "no GPU" line, the summary and a non-zero exit; its watchdog (a tiny
CHECK_LIMIT_S against CHECK_SELFTEST=hang, a step that never ends with a stand-in job and
tracer) must print its FAIL line and the summary, exit 124 and leave no process behind; and
its trace checks (tests/gpu/validate.py) run on a --gpu trace of the simulated stack."""
import json
import os
import shutil
import subprocess
import sys
import time

from lib import ROOT, Skip, need_root

CHECK = os.path.join(ROOT, "tests", "gpu", "check.sh")
VALIDATE = os.path.join(ROOT, "tests", "gpu", "validate.py")


def run_check(env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.monotonic()
    # a session of its own: when the watchdog is broken, everything it left is found by sid
    p = subprocess.Popen(["bash", CHECK], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=e, cwd=ROOT, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in session_pids(p.pid):
            os.kill(pid, 9)
        p.communicate()
        raise AssertionError(f"check.sh still running after {timeout} s")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), time.monotonic() - t0


def session_pids(sid):
    out = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[4]) == sid:
                    out.append(int(d))
        except (ValueError, OSError):
            pass
    return out


def alive(pid):
    """pid exists and is not a zombie waiting for its reaper"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_gpu_check_static():
    p = subprocess.run(["bash", "-n", CHECK], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    if not shutil.which("shellcheck"):
        raise Skip("shellcheck not installed (make deps)")
    p = subprocess.run(["shellcheck", CHECK], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout


def test_gpu_check_no_gpu():
    need_root()
    if subprocess.run("nvidia-smi -L", shell=True, capture_output=True).returncode == 0:
        raise Skip("this machine has a GPU: run tests/gpu/check.sh itself")
    p, secs = run_check()
    lines = p.stdout.splitlines()
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    # the first check that fails ends the run: nothing else was tried (no other line)
    assert lines == ["FAIL no GPU: nvidia-smi -L failed (no NVIDIA driver or device on this "
                     "machine)", "summary: 0 passed, 1 failed, 0 warnings"], p.stdout


def test_gpu_check_watchdog():
    need_root()
    p, secs = run_check({"CHECK_SELFTEST": "hang", "CHECK_LIMIT_S": "2"})
    lines = p.stdout.splitlines()
    assert p.returncode == 124, (p.returncode, p.stdout, p.stderr)
    assert len(lines) == 3 and lines[0].startswith("INFO selftest pids: "), p.stdout
    assert lines[1:] == ["FAIL check.sh: time limit of 2 s reached: stopping tptrace and the job",
                         "summary: 0 passed, 1 failed, 0 warnings"], p.stdout
    # not before its limit (a lower bound); that it was the watchdog and not the harness that
    # ended it, the FAIL line says
    assert secs >= 2, secs
    pids = [int(x) for x in lines[0].split(": ", 1)[1].split()]
    assert len(pids) == 4, pids          # script, body, stand-in job, stand-in tracer (timeout)
    # killed before the script exited; gone once their reaper ran (a failsafe, not a bound)
    deadline = time.monotonic() + 60
    while any(alive(x) for x in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [x for x in pids if alive(x)], [x for x in pids if alive(x)]


def test_gpu_check_validator_on_sim():
    """tests/gpu/validate.py (check.sh's trace checks) on a tptrace --gpu trace of the simulated
    stack, against a Kineto-shaped reference built from the sim's own account of what ran
    (TPSIM_VERBOSE: each kernel's correlation, stream, name, start): the arrow and
    per-stream sequence checks pass, and fail once one reference kernel is renamed."""
    need_root()
    from gpulib import need_ptrace, tpsim_items
    from lib import WL, tmp_path, trace_workload
    need_ptrace()
    steps = 3
    trace, wl, _ = trace_workload([os.path.join(WL, "sim_train"), "--steps", str(steps),
                                   "--kernel-us", "800"], tracer_args=["--gpu"],
                                  env={"TPSIM_VERBOSE": "1"}, out_name="gpucheck-sim.json")
    kernels = [(c, it) for c, it in sorted(tpsim_items(wl.err.text()).items())
               if it["kind"] == "kernel"]
    assert len(kernels) == 4 * steps, kernels
    kin = []
    for corr, it in kernels:
        ts = it["start"] / 1000
        kin.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts,
                    "dur": 1, "pid": 1, "tid": it["tid"], "args": {"correlation": corr}})
        kin.append({"ph": "X", "cat": "kernel", "name": it["name"], "ts": ts,
                    "dur": (it["end"] - it["start"]) / 1000, "pid": 0, "tid": it["stream"],
                    "args": {"correlation": corr, "stream": it["stream"]}})
    t0, t1 = min(k["ts"] for k in kin), max(k["ts"] + k["dur"] for k in kin)
    kin.append({"ph": "X", "cat": "user_annotation", "name": "tpcheck:eager", "ts": t0,
                "dur": t1 - t0, "pid": 1, "tid": 1})
    base = trace["tptrace"]["base_mono_ns"]
    first = min(e["ts"] for e in trace["traceEvents"] if e.get("ph") == "X")
    phases = tmp_path("gpucheck-phases.log")
    with open(phases, "w") as f:
        f.write(f"PHASE eager {base + round(first * 1000) - 1000} {round(t1 * 1000) + 1000}\n")

    def validate(ref):
        path = tmp_path("gpucheck-kineto.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": ref}, f)
        p = subprocess.run([sys.executable, VALIDATE, tmp_path("gpucheck-sim.json"), path, phases,
                            str(steps)], capture_output=True, text=True, timeout=60)
        assert not p.stderr, p.stderr
        return p.stdout.splitlines()

    lines = validate(kin)
    want = ["PASS our trace has tptrace.base_mono_ns",
            "PASS eager: 12 host launch events ({'cudaLaunchKernel': 12})",
            "PASS eager: no joined launch left unresolved (0)",
            "PASS eager: no driver launch recorded inside a runtime launch (0)"]
    assert all(w in lines for w in want), lines
    assert [l for l in lines if "ac2g arrows, each from a launch" in l][0].startswith("PASS"), lines
    assert [l for l in lines if l.startswith("PASS eager: kernel names per stream joined to our "
                                             "launches = Kineto's")], lines
    assert [l for l in lines if l.startswith("PASS clock_residual_ns")], lines
    renamed = [dict(e) for e in kin]
    k = [e for e in renamed if e["cat"] == "kernel"][5]
    k["name"] = "not_" + k["name"]
    lines = validate(renamed)
    assert [l for l in lines if l.startswith("FAIL eager: kernel names per stream joined to our "
                                             "launches = Kineto's") and "not_" in l], lines


# ---- validate.py --real on synthetic traces: each check passes on a trace that shows the
# behaviour and fails on one that breaks it (check.sh runs them on a real GPU only) ----

def real_checks():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_validate", VALIDATE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Synth:
    """A tptrace --gpu trace built by hand: base_mono_ns 0, so ts (us) * 1000 is the
    CLOCK_MONOTONIC ns a check compares with the job's own windows."""

    def __init__(self):
        self.evs, self.corr = [], 100
        self.targets = {}

    def launch(self, pid, tid, ts, dur=5.0, name="cudaLaunchKernel", cat="cuda_runtime",
               kernel="k", gpu=(0, 7), kstart=None, kdur=2.0, gcat="kernel", args=None,
               arrow=True):
        self.corr += 1
        c = self.corr
        h = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
             "args": {"correlation": c, "kernel": kernel}}
        self.evs.append(h)
        ks = ts + dur + 1.0 if kstart is None else kstart
        g = {"ph": "X", "cat": gcat, "name": kernel, "pid": gpu[0], "tid": gpu[1], "ts": ks,
             "dur": kdur, "args": dict({"correlation": c}, **(args or {}))}
        self.evs.append(g)
        if arrow:
            self.evs.append({"ph": "s", "cat": "ac2g", "id": c, "pid": pid, "tid": tid, "ts": ts})
            self.evs.append({"ph": "f", "cat": "ac2g", "id": c, "pid": gpu[0], "tid": gpu[1],
                             "ts": ks, "bp": "e"})
        return h, g

    def host(self, pid, tid, ts, name):
        self.evs.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": pid, "tid": tid,
                         "ts": ts, "dur": 1.0, "args": {}})

    def trace(self, **gpu):
        return {"traceEvents": self.evs,
                "tptrace": {"base_mono_ns": 0, "gpu_join": {"calls": 1, "joined": 1},
                            "targets": [{"pid": p, "gpu": dict(g, **gpu)}
                                        for p, g in (self.targets or {1: {}}).items()]}}


def kinds(results):
    return [k for k, _ in results]


def test_gpu_check_real_threads():
    v = real_checks()
    s = Synth()
    for i in range(200):
        s.launch(1, 11, 1000.0 + i * 20)
    ctx = {"pid": 1, "tids": [1, 11], "default_thread_id_type": 0}
    r = v.check_threads(s.trace(), ctx)
    assert "FAIL" not in kinds(r) and kinds(r).count("PASS") == 2, r
    # CUPTI's default thread id (pthread_self, not the OS tid): nothing joins
    s = Synth()
    for i in range(200):
        s.launch(1, 11, 1000.0 + i * 20, arrow=i < 150)
    r = v.check_threads(s.trace(), ctx)
    assert [m for k, m in r if k == "FAIL" and "75.0% of the job's 200 launches" in m], r
    # an arrow from a thread that is not the job's
    s = Synth()
    s.launch(1, 140737, 1000.0)
    r = v.check_threads(s.trace(), ctx)
    assert [m for k, m in r if k == "FAIL" and "140737" in m], r


def test_gpu_check_real_drops():
    v = real_checks()
    ctx = {"pid": 1, "launches": 10, "window": [0, 10**9], "buf_bytes": "4096"}
    s = Synth()
    for i in range(7):
        s.launch(1, 1, 100.0 + i * 10)
    assert "FAIL" not in kinds(v.check_drops(s.trace(records_dropped=5), ctx))
    r = v.check_drops(s.trace(records_dropped=2), ctx)       # 3 lost, 2 counted: silent loss
    assert [m for k, m in r if k == "FAIL" and "3 missing <= 2" in m], r
    r = v.check_drops(s.trace(records_dropped=0), ctx)       # lost, none reported
    assert "FAIL" in kinds(r), r
    r = v.check_drops(s.trace(), ctx)                         # no count at all: unknown, not 0
    assert [m for k, m in r if k == "FAIL" and "unknown is not 0" in m], r


def test_gpu_check_real_clock():
    v = real_checks()
    # 60 s of reads at 50 ppm drift and a 3 ms offset, each bracketed within 200 ns
    pairs = [[t - 100, int(t + 3_000_000 + t * 50e-6), t + 100]
             for t in range(10**9, 61 * 10**9, 2 * 10**9)]
    s = Synth()
    probes = []
    for i in range(5):
        t0 = 10**9 + i * 10**8
        s.launch(1, 1, t0 / 1000 + 1, kstart=t0 / 1000 + 8)
        probes.append([t0, t0 + 20_000])
    ctx = {"pid": 1, "pairs": pairs, "probes": probes}
    r = v.check_clock(s.trace(clock_residual_ns=300, clock_samples=50), ctx)
    assert "FAIL" not in kinds(r), r
    assert [m for k, m in r if k == "INFO" and "drift 50.000 ppm" in m and "offset" in m], r
    # a clock that jumps by 5 us mid-run: no line fits it
    bad = [[a, c + (5000 if i > 10 else 0), b] for i, (a, c, b) in enumerate(pairs)]
    r = v.check_clock(None, dict(ctx, pairs=bad))
    assert [m for k, m in r if k == "FAIL" and "linear alignment" in m], r
    # a probe kernel 3 us before the window it was launched in: misaligned
    s2 = Synth()
    s2.launch(1, 1, 1_000_001.0, kstart=999_997.0)
    r = v.check_clock(s2.trace(clock_residual_ns=300), dict(ctx, probes=[[10**9, 10**9 + 20_000]]))
    assert [m for k, m in r if k == "FAIL" and "3000 ns outside" in m], r
    r = v.check_clock(s.trace(clock_residual_ns=4000), ctx)
    assert [m for k, m in r if k == "FAIL" and "clock_residual_ns 4000" in m], r


def test_gpu_check_real_delivery_and_early():
    v = real_checks()
    s = Synth()
    s.launch(1, 1, 100.0, dur=10.0, kstart=104.0)     # starts before its launch returns
    s.launch(1, 1, 200.0)
    t = s.trace(buffers_out_of_order=3)
    r = v.check_delivery(t, {"pid": 1})
    assert "FAIL" not in kinds(r) and [m for k, m in r if "buffers_out_of_order 3" in m], r
    r = v.check_early(t, {"pid": 1})
    assert "FAIL" not in kinds(r) and [m for k, m in r if m.startswith("1 of 2 joined")], r
    s.evs.append(dict(s.evs[1]))                      # the first kernel twice
    assert "FAIL" in kinds(v.check_delivery(s.trace(), {"pid": 1}))
    s = Synth()
    s.launch(1, 1, 100.0, kstart=97.0)                # before the call began: a clock error
    r = v.check_early(s.trace(), {"pid": 1})
    assert [m for k, m in r if k == "FAIL" and "(1 do)" in m], r


def test_gpu_check_real_nccl():
    v = real_checks()
    ctx = {"pid": 1, "window": [0, 10**9], "overlap_expected": True, "nranks": 1}
    s = Synth()
    s.host(1, 1, 90.0, "cudaEventRecord")
    s.host(1, 1, 95.0, "cudaStreamWaitEvent")
    s.launch(1, 1, 100.0, name="cuLaunchKernelEx", cat="cuda_driver",
             kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL", gpu=(0, 13), kstart=110.0, kdur=500.0)
    s.launch(1, 1, 120.0, kernel="ampere_sgemm_128x64_nn", gpu=(0, 7), kstart=130.0, kdur=100.0)
    r = v.check_nccl(s.trace(), ctx)
    assert "FAIL" not in kinds(r) and "WARN" not in kinds(r), r
    # NCCL's kernel on the user's stream, no events, no overlap, launched by the runtime
    s = Synth()
    s.launch(1, 1, 100.0, kernel="ncclDevKernel_AllReduce", gpu=(0, 7), kstart=110.0, kdur=5.0)
    s.launch(1, 1, 120.0, kernel="ampere_sgemm", gpu=(0, 7), kstart=130.0, kdur=5.0)
    r = v.check_nccl(s.trace(), dict(ctx, nranks=2))
    assert kinds(r).count("FAIL") == 4, r


def test_gpu_check_real_two_procs_and_contexts():
    v = real_checks()
    procs = [{"pid": 1, "marker": "sin_kernel", "launches": 2},
             {"pid": 2, "marker": "cos_kernel", "launches": 2}]
    s = Synth()
    for i in range(2):
        s.launch(1, 1, 100.0 + i, kernel="sin_kernel_cuda", gpu=(1000, 7))
        s.launch(2, 2, 100.0 + i, kernel="cos_kernel_cuda", gpu=(2000, 7))
    assert "FAIL" not in kinds(v.check_two_procs(s.trace(), {"procs": procs}))
    # the bug of issue 24: correlations joined across processes, one set of GPU tracks
    s = Synth()
    s.launch(1, 1, 100.0, kernel="cos_kernel_cuda", gpu=(0, 7))
    s.launch(1, 1, 101.0, kernel="sin_kernel_cuda", gpu=(0, 7))
    s.launch(2, 2, 200.0, kernel="cos_kernel_cuda", gpu=(0, 7))
    s.launch(2, 2, 201.0, kernel="cos_kernel_cuda", gpu=(0, 7))
    r = v.check_two_procs(s.trace(), {"procs": procs})
    assert [m for k, m in r if k == "FAIL" and "1 arrows to the other" in m], r
    assert [m for k, m in r if k == "FAIL" and "share 1" in m], r
    ctx = {"pid": 1, "window": [0, 10**9], "memset_bytes": 1 << 20, "copy_bytes": 4096}
    s = Synth()
    s.launch(1, 1, 100.0, name="cuMemsetD32_v2", cat="cuda_driver", kernel="Memset",
             gcat="gpu_memset", gpu=(1000, 21), args={"bytes": 1 << 20})
    s.launch(1, 1, 110.0, name="cuMemcpyDtoH_v2", cat="cuda_driver", kernel="Memcpy DtoH",
             gcat="gpu_memcpy", gpu=(1000, 21), args={"bytes": 4096})
    s.launch(1, 1, 120.0, kernel="sin_kernel_cuda", gpu=(1000, 7))
    assert "FAIL" not in kinds(v.check_contexts(s.trace(), ctx))
    s.evs = [dict(e, tid=7) if e.get("tid") == 21 else e for e in s.evs]   # one track for both
    r = v.check_contexts(s.trace(), ctx)
    assert [m for k, m in r if k == "FAIL" and "(1 shared)" in m], r


def test_gpu_check_real_cli():
    """validate.py --real: one line for a bad check name; a check's lines name it"""
    p = subprocess.run([sys.executable, VALIDATE, "--real", "bogus", "a", "b"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and p.stdout == "" and p.stderr.count("\n") == 1 and \
        "--real wants one of threads, drops, clock" in p.stderr, p.stderr
    ctx = tmp_ctx({"pairs": [[1000, 5000, 1200], [2 * 10**9, 2 * 10**9 + 4000, 2 * 10**9 + 200],
                             [4 * 10**9, 4 * 10**9 + 4000, 4 * 10**9 + 200]]})
    p = subprocess.run([sys.executable, VALIDATE, "--real", "clock", "-", ctx], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and all(l.split()[1] == "clock:" for l in p.stdout.splitlines()), \
        p.stdout


def tmp_ctx(obj):
    from lib import tmp_path
    path = tmp_path("gpucheck-ctx.json")
    with open(path, "w") as f:
        json.dump(obj, f)
    return path
