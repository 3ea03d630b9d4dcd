"""Tier 2: `--torch` on the real PyTorch 2.x of the test venv (tests/venv/; Kineto, CPU only):
tests/workloads/torch_train.py (as test_torch.py runs it on Debian's 1.13), with the wheel's own
libcudart as the runtime its launch_phase calls through ctypes. Traced with `--torch -d 6` once
it runs:
  - python_function slices (2.x's stacks: Kineto's Python tracer) with "Python id" and
    "Python parent id" forming one tree, no frame of tptrace's snippets (nor what they called,
    the optimizer hook's prof.step()) left in it, every aten::addmm under
    torch/nn/modules/linear.py's forward under the workload's main;
  - aten::addmm with Input Dims and Input type, custom_phase as user_annotation around the ops;
  - ProfilerStep#0..N-1 from the optimizer hook: one per optimizer step in the window, each
    ending inside its Optimizer.step span (the post hook runs in it), one after the other,
    none left open at the stop;
  - every cudaLaunchKernel tptrace's probe saw inside the window lies inside a launch_phase
    span on the same tid (the clock alignment);
  - the job's stdout is identical to an untraced run's, its stderr holds only the lines
    Kineto itself writes when any profiler starts and stops, the profiler on only inside the
    window."""
import glob
import json
import os
import re
import time

from lib import (ROOT, Tracer, Workload, fresh_tmp_path, load_trace, need_root, tmp_path,
                 venv_python)
from test_torch import covered, job_output, read_times, x_events

TRAIN = os.path.join(ROOT, "tests", "workloads", "torch_train.py")
# libkineto's log line: "USDT:2026-12-01 23:46:50 19222:19222 SyncActivityProfilerHandler.cpp:52] .."
KINETO_LINE = re.compile(r"^(USDT|INFO|WARNING|ERROR):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ "
                         r"\w+\.cpp:\d+\] ")


def wheel_cudart(py):
    venv = os.path.dirname(os.path.dirname(py))
    libs = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "nvidia", "*", "lib",
                                  "libcudart.so.*"))
    assert len(libs) == 1, libs
    return libs[0]


def train(py, steps, times):
    # (importing torch 2.x takes a while on a loaded machine)
    wl = Workload([py, TRAIN, str(steps), times, wheel_cudart(py)], wait_ready=False)
    wl.wait_ready(180)
    return wl


def untraced_output(py, steps, name):
    wl = train(py, steps, tmp_path(name + ".ref.times"))
    try:
        wl.go()
        wl.wait_done(300)
        assert wl.finish() == 0
    finally:
        wl.kill()
    return job_output(wl), wl.err.text()


def test_torch2_profile_merged():
    need_root()
    py = venv_python()
    steps, name = 6000, "torch2_merged"
    out, times = fresh_tmp_path(name + ".json"), tmp_path(name + ".times")
    wl = train(py, steps, times)
    try:
        wl.go()
        assert wl.out.wait_for(lambda l: l.startswith("step 100 "), 120), wl.err.text()
        t_attach = time.monotonic_ns()
        tr = Tracer(["-p", str(wl.pid), "--torch", "-d", "6", "-o", out])
        rc = tr.wait(300)
        t_gone = time.monotonic_ns()
        assert rc == 0, f"tptrace rc={rc}: {tr.err.text()}"
        wl.wait_done(300)
        assert wl.finish(60) == 0
    finally:
        wl.kill()
    ref_out, ref_err = untraced_output(py, steps, name)
    assert f"tptrace: --torch: pid {wl.pid}: " in tr.err.text(), tr.err.text()
    assert job_output(wl) == ref_out
    # nothing of tptrace's in the job's stderr: only Kineto's own start and stop lines, which
    # it writes for any user of torch.profiler (it reads KINETO_LOG_LEVEL when loaded)
    assert ref_err == "", ref_err
    err = wl.err.text().splitlines()
    assert [l.split("] ")[-1] for l in err if l.startswith("USDT:")] == \
        ["profiler_start", "profiler_stop"], err
    assert not [l for l in err if not KINETO_LINE.match(l)], err
    rows = read_times(times)
    assert not [r for r in rows if r[3] and (r[0] + r[1] < t_attach or r[0] > t_gone)], \
        "torch.profiler on outside the window"

    trace = load_trace(out)
    meta = trace["tptrace"]["targets"][0]["torch"]
    assert meta["torch_version"].startswith("2."), meta
    assert meta["kineto"] is True and "error" not in meta, meta
    assert meta["steps_method"].startswith("torch.optim.optimizer.register_optimizer_step_"
                                           "post_hook"), meta
    assert meta["clock"]["start_stop_agree"] is True, meta["clock"]
    assert 0 <= meta["clock"]["residual_ns"] < 20000, meta["clock"]
    assert meta["threads"][0] == {"torch_thread": 1, "os_tid": wl.pid}, meta["threads"]
    assert meta["events_dropped"]["tptrace_own"] > 0, meta
    assert meta["events_dropped"]["step_open_at_stop"] == 1, meta
    base = trace["tptrace"]["base_mono_ns"]
    w0, w1 = meta["window_mono_ns"]
    assert t_attach < w0 < w1 < t_gone, (t_attach, w0, w1, t_gone)

    ev = x_events(trace, wl.pid)
    torch_ev = [e for e in ev if e["cat"] in ("cpu_op", "user_annotation", "python_function")]
    assert all(e["tid"] == wl.pid for e in torch_ev), {e["tid"] for e in torch_ev}
    # the window's edges bound every torch event (frames open across them are cut there)
    assert all(w0 <= base + e["ts"] * 1000 and base + (e["ts"] + e["dur"]) * 1000 <= w1 + 1000
               for e in torch_ev)

    # python_function: one tree, none of tptrace's frames in it
    pyf = [e for e in torch_ev if e["cat"] == "python_function"]
    assert len(pyf) == meta["python_functions"] and len(pyf) > 500, (len(pyf), meta)
    ids = {e["args"]["Python id"] for e in pyf}
    assert len(ids) == len(pyf), "Python ids repeated"
    orphans = [e for e in pyf if e["args"]["Python parent id"] is not None and
               e["args"]["Python parent id"] not in ids]
    assert not orphans, orphans[:3]
    assert not [e for e in pyf if "tptrace snippet" in e["name"] or "on_step" in e["name"]]
    roots = [e for e in pyf if e["args"]["Python parent id"] is None]
    # the module-level line that calls main(), wherever edits to the workload put it
    with open(TRAIN) as f:
        call = next(i for i, l in enumerate(f, 1) if l.startswith("main("))
    assert [e["name"] for e in roots] == [f"torch_train.py({call}): <module>"], \
        [e["name"] for e in roots][:5]
    by_id = {e["args"]["Python id"]: e for e in pyf}
    for e in pyf:
        p = by_id.get(e["args"]["Python parent id"])
        # (times are written in whole ns: a sum of two may round 1 ns apart)
        assert p is None or (p["ts"] <= e["ts"] and
                             e["ts"] + e["dur"] <= p["ts"] + p["dur"] + 0.002), (e, p)
    assert not [e for e in pyf if e["name"].startswith("<string>(") or
                e["name"].startswith("<tptrace>(")], "the door's wrapper"

    addmm = [e for e in torch_ev if e["name"] == "aten::addmm"]
    relu = [e for e in torch_ev if e["name"] == "aten::relu"]
    assert len(addmm) > 100 and relu and all(e["cat"] == "cpu_op" for e in addmm + relu)
    assert {json.dumps(e["args"]["Input Dims"]) for e in addmm} == {
        "[[128], [32, 64], [64, 128], [], []]", "[[10], [32, 128], [128, 10], [], []]"}
    assert {json.dumps(e["args"]["Input type"]) for e in addmm} == {
        '["float", "float", "float", "Scalar", "Scalar"]'}
    fwd = [e for e in pyf if e["name"].startswith("torch/nn/modules/linear.py(") and
           e["name"].endswith("): forward")]
    assert all(covered(addmm, fwd)), "an aten::addmm outside linear.py's forward"
    mains = [e for e in pyf if e["name"].startswith("torch_train.py(") and
             e["name"].endswith("): main")]
    # (a frame open at the window's end is cut there as main is: their ends are one time,
    # written as two sums of µs floats that can differ in the last digit, so 2 ns of slack as
    # for parents above)
    assert len(mains) == 1, [e["name"] for e in mains]
    outside = [e for e in fwd if not (mains[0]["ts"] <= e["ts"] and e["ts"] + e["dur"] <=
                                      mains[0]["ts"] + mains[0]["dur"] + 0.002)]
    assert not outside, (mains[0], outside[:3])

    phases = [e for e in torch_ev if e["name"] == "custom_phase"]
    assert len(phases) > 50 and all(e["cat"] == "user_annotation" for e in phases)
    # but for the window's edges: a custom_phase already open when the profiler started is
    # not recorded (its ops are)
    first = min(e["ts"] for e in phases)
    last = max(e["ts"] + e["dur"] for e in phases)
    ops = [e for e in addmm + relu if first <= e["ts"] and e["ts"] + e["dur"] <= last]
    assert len(ops) >= len(addmm + relu) - 6, (len(ops), len(addmm + relu))
    cov = covered(ops, phases)
    assert all(cov), f"{cov.count(False)} of {len(ops)} ops outside custom_phase"
    assert not [e for e in torch_ev if e["name"] in ("tptrace#clock", "ProfilerStep*")]

    # steps: ProfilerStep#0..N-1 back to back, each with its optimizer step, N as counted
    psteps = sorted((e for e in torch_ev if e["name"].startswith("ProfilerStep#")),
                    key=lambda e: e["ts"])
    opt = sorted((e for e in torch_ev if e["name"] == "Optimizer.step#SGD.step"),
                 key=lambda e: e["ts"])
    assert all(e["cat"] == "user_annotation" for e in psteps)
    assert [e["name"] for e in psteps] == [f"ProfilerStep#{i}" for i in range(meta["steps"])]
    assert len(psteps) == meta["steps"] > 5, (len(psteps), meta["steps"])
    # the last optimizer step may be cut by the stop before its hook ran
    assert len(opt) in (len(psteps), len(psteps) + 1), (len(opt), len(psteps))
    # (the post hook runs inside the Optimizer.step span: the step ends in it)
    assert all(s["ts"] <= o["ts"] <= s["ts"] + s["dur"] <= o["ts"] + o["dur"]
               for o, s in zip(opt, psteps))
    # one after the other (prof.step() closes one and opens the next)
    assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(psteps, psteps[1:]))

    # a launch into the wheel's runtime sits under the launch_phase that issued it
    launches = [e for e in ev if e["cat"] == "cuda_runtime" and e["name"] == "cudaLaunchKernel"]
    spans = [e for e in torch_ev if e["name"] == "launch_phase"]
    first, last = min(e["ts"] for e in spans), max(e["ts"] + e["dur"] for e in spans)
    in_window = [e for e in launches if first <= e["ts"] and e["ts"] + e["dur"] <= last]
    assert len(in_window) > 5, (len(launches), len(in_window))
    cov = covered(in_window, spans)
    assert all(cov), f"{cov.count(False)} of {len(in_window)} launches outside launch_phase"
