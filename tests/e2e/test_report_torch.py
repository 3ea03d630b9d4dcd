"""Tier 2: `tptrace report` of `tptrace --torch` traces of the test venv's torch 2.x (CPU only)
running tests/workloads/torch_train.py, compared with torch's own key_averages() of the same
profile, which the job computes itself (TORCH_TRAIN_KEYAVG) from the very profiler tptrace
started (issue 26):
  - a CPU-only job (no CUDA call at all): the report exits 0, its steps are the trace's
    ProfilerStep#N slices, and every aten:: op's count is torch's, its self and total CPU
    time torch's within 1 ns per slice (both are Kineto's ns timestamps; tptrace shifts them
    by one constant, torch keeps float us), its GPU time unknown (no --gpu), never 0;
  - with --gpu and the simulated runtime (launch_phase launches a kernel a step): the
    launch_phase row's GPU time is the kernels its launches made, from the raw events;
  - Debian's torch 1.13 (legacy profiler: no python_function slices, so a CPU-only job's
    trace held no event the report read, and it exited 1): a report, exit 0, steps from the
    ProfilerStep#N slices tptrace derives, the model's ops (addmm, mm, relu, mse_loss, t, sum)
    equal to torch's own table. (1.13's aten::empty/zeros/zero_ also count what torch.profiler
    ran at its own start and stop, which tptrace leaves out with its snippets' events.)"""
import json
import os
import subprocess

from lib import (ROOT, SIM_LIB, TPTRACE, Tracer, Workload, fresh_tmp_path, load_trace,
                 need_root, tmp_path, venv_python)

TRAIN = os.path.join(ROOT, "tests", "workloads", "torch_train.py")


DEBIAN_PY = "/usr/bin/python3"


def traced(name, gpu, py=None):
    """torch_train.py under `tptrace --torch -d 2` once it runs; (trace path, key_averages)"""
    need_root()
    py = py or venv_python()
    out, ka = fresh_tmp_path(name + ".json"), fresh_tmp_path(name + ".keyavg.json")
    lib = [os.path.join(SIM_LIB, "libcudart.so.13")] if gpu else []
    wl = Workload([py, TRAIN, "1000000", tmp_path(name + ".times")] + lib,
                  env={"TORCH_TRAIN_KEYAVG": ka}, wait_ready=False)
    try:
        wl.wait_ready(180)
        wl.go()
        assert wl.out.wait_for(lambda l: l.startswith("step 20 "), 120), wl.err.text()
        tr = Tracer(["-p", str(wl.pid), "--torch", "-d", "2", "-o", out] +
                    (["--gpu"] if gpu else []))
        rc = tr.wait(300)
        assert rc == 0, f"tptrace rc={rc}: {tr.err.text()}"
        # the job ends its loop once the profiler it saw is off, then writes key_averages
        wl.wait_done(300)
        assert wl.finish(60) == 0, wl.err.text()
    finally:
        wl.kill()
    assert any(l.startswith("KEYAVG ") for l in wl.out.lines), wl.out.text()
    with open(ka) as f:
        return out, {r["key"]: r for r in json.load(f)}


def report_json(path):
    p = subprocess.run([TPTRACE, "report", "--json", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr)
    return json.loads(p.stdout)


def check_ops(r, ka, only=None):
    ours = {o["name"]: o for o in r["ops"]["top"]}
    aten_t = {k for k in ka if k.startswith("aten::")}
    aten_o = {k for k in ours if k.startswith("aten::")}
    assert aten_t and aten_t == aten_o, sorted(aten_t ^ aten_o)
    for k in sorted(only or aten_t):
        o, t = ours[k], ka[k]
        assert o["count"] == t["count"], (k, o, t)
        assert abs(o["self_cpu_ns"] - t["self_cpu_us"] * 1000) <= o["count"], (k, o, t)
        assert abs(o["total_cpu_ns"] - t["cpu_total_us"] * 1000) <= o["count"], (k, o, t)
    return ours


def test_report_torch_cpu_only_ops():
    path, ka = traced("report_torch_cpu", gpu=False)
    trace = load_trace(path)
    base = trace["tptrace"]["base_mono_ns"]
    r = report_json(path)
    steps = sorted((base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000))
                   for e in trace["traceEvents"] if e.get("cat") == "user_annotation"
                   and e["name"].startswith("ProfilerStep#"))
    assert steps and r["steps"]["method"] == "profiler_steps", r["steps"]
    got = [(s["start_ns"], s["start_ns"] + s["wall_ns"]) for s in r["steps"]["per_rank"][0]["steps"]]
    assert got == steps
    ours = check_ops(r, ka)
    assert all(o["gpu_total_ns"] is None for o in ours.values())
    p = subprocess.run([TPTRACE, "report", path], stdout=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0 and "aten::addmm" in p.stdout
    assert not [l for l in p.stdout.splitlines() if len(l) > 100]


def test_report_torch_gpu_ops():
    path, ka = traced("report_torch_gpu", gpu=True)
    trace = load_trace(path)
    base = trace["tptrace"]["base_mono_ns"]
    r = report_json(path)
    ours = check_ops(r, ka)
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    kern = {e["args"]["correlation"]: round(e["dur"] * 1000) for e in ev if e["cat"] == "kernel"}
    spans = [(e["tid"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in ev
             if e["cat"] == "user_annotation" and e["name"] == "launch_phase"]
    want = n = 0
    for e in ev:
        if e["cat"] == "cuda_runtime" and e["name"] == "cudaLaunchKernel":
            x = round(e["ts"] * 1000)
            if any(t == e["tid"] and a <= x < b for t, a, b in spans):
                want += kern.get(e["args"]["correlation"], 0)
                n += 1
    lp = ours["launch_phase"]
    assert n >= 2 and lp["launches"] == n and lp["gpu_total_ns"] == want == lp["gpu_self_ns"], \
        (lp, want, n)
    assert base and all(o["gpu_total_ns"] == 0 for k, o in ours.items() if k.startswith("aten::"))


def test_report_torch113_cpu_only():
    need_root()
    if subprocess.run([DEBIAN_PY, "-c", "import torch"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode:
        from lib import Skip
        raise Skip("Debian's python3-torch is not installed (make deps installs it)")
    path, ka = traced("report_torch113", gpu=False, py=DEBIAN_PY)
    trace = load_trace(path)
    assert not [e for e in trace["traceEvents"] if e.get("cat") == "python_function"]
    r = report_json(path)
    base = trace["tptrace"]["base_mono_ns"]
    steps = sorted((base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000))
                   for e in trace["traceEvents"] if e.get("cat") == "user_annotation"
                   and e["name"].startswith("ProfilerStep#"))
    got = [(s["start_ns"], s["start_ns"] + s["wall_ns"]) for s in r["steps"]["per_rank"][0]["steps"]]
    assert steps and r["steps"]["method"] == "profiler_steps" and got == steps, r["steps"]
    check_ops(r, ka, only=["aten::addmm", "aten::mm", "aten::relu", "aten::mse_loss", "aten::t",
                           "aten::sum"])
