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
