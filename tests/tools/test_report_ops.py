#!/usr/bin/env python3
"""`tptrace report` on saved traces, no root needed (issue 26): the steps of a --py-stacks
--gpu trace attached to a running loop (calls "unfinished" at attach, drawn to the trace's
end), a step that ends before it starts (a bug, said as one), the operator breakdown of
--torch traces (tests/tools/data/report_traces/torch-*.json.gz) and `--compare`.

Run from the repo root after `make`. Prints `ok <name>` or `FAIL <name>: reason`; exit 1 if
any failed."""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import traceback

from test_report import DATA, TPTRACE, load, spans, sync_steps

failures = []


def near(x, y):
    """equal but for the JSON's 15-17 significant digits"""
    return abs(x - y) <= 1e-12 * max(abs(x), abs(y))


def run(*args, rc_want=0):
    p = subprocess.run([TPTRACE, "report"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == rc_want, (p.returncode, p.stdout[-1500:], p.stderr)
    return p


def rjson(*args):
    return json.loads(run("--json", *args).stdout)


def path(name):
    return f"{DATA}/{name}.json.gz"


def case_pystacks_attach_steps():
    """py_train.py traced with --py-stacks --gpu, attached after GO: the first syncs' return
    probes were not attached yet, so they are written "unfinished", drawn to the trace's end.
    Steps end at the finished syncs only: every step is the span between two consecutive
    finished syncs' ends, none wraps below zero (it read 1.8e19 ns, mean 1,057,968 s)."""
    t = load("pystacks-attach")
    unfinished = [e for e in t["traceEvents"] if e.get("name") == "cudaStreamSynchronize"
                  and e["args"].get("unfinished")]
    assert unfinished, "the saved trace lost what it reproduces"
    ends = [b for a, b, e in spans(t, "cuda_runtime")
            if e["name"] == "cudaStreamSynchronize" and not e["args"].get("unfinished")]
    want = list(zip(ends, ends[1:]))
    r = rjson(path("pystacks-attach"))
    pr = r["steps"]["per_rank"][0]
    got = [(s["start_ns"], s["start_ns"] + s["wall_ns"]) for s in pr["steps"]]
    assert got == want, (got[:3], want[:3])
    assert all(0 < s["wall_ns"] < 1e6 for s in pr["steps"]), pr["step_wall_ns"]
    walls = sorted(b - a for a, b in want)
    assert pr["step_wall_ns"]["mean"] == sum(walls) / len(walls), pr["step_wall_ns"]
    assert "steps_invalid" not in pr
    out = run(path("pystacks-attach")).stdout
    assert " s " not in out.split("Steps")[1].split("Findings")[0], out


def case_step_ending_before_start_is_a_bug():
    """A trace whose same-thread syncs overlap (impossible for real calls): the step between
    them ends before it starts. It is reported as a tptrace bug, left out of the means; never
    a wrapped unsigned number."""
    ev = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 7, "args": {"name": "x"}}]
    # syncs ending at 100, 300, 250 (the third started inside the second), 400, 500 us
    for ts, dur in ((90, 10), (200, 100), (240, 10), (390, 10), (490, 10)):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 7,
                   "tid": 7, "ts": ts, "dur": dur, "args": {"stream": "0x0", "correlation": ts}})
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.json")
        with open(p, "w") as f:
            json.dump({"traceEvents": ev, "tptrace": {"base_mono_ns": 0, "version": "t"}}, f)
        r = rjson(p)
        pr = r["steps"]["per_rank"][0]
        walls = [s["wall_ns"] for s in pr["steps"]]
        assert walls == [200000, None, 150000, 100000], walls
        bad = pr["steps"][1]
        assert bad["wall_ns_unknown"].startswith("tptrace bug: this step ends 50000 ns before it "
                                                 "starts"), bad
        assert pr["steps_invalid"] == 1
        assert pr["step_wall_ns"]["mean"] == 150000, pr["step_wall_ns"]
        assert r["ranks"] == [] or all(k["step_wall_ns_mean"] == 150000 for k in r["ranks"])
        out = run(p).stdout
        assert "150.0 us" in out and "1 step ends before it starts" in out, out


def keyavg(name):
    with open(f"{DATA}/{name}.keyavg.json") as f:
        return {r["key"]: r for r in json.load(f)}


def check_against_torch(name):
    """tptrace report's operator rows against torch's own key_averages() of the same profile,
    computed in the job (tests/workloads/torch_train.py TORCH_TRAIN_KEYAVG) from the very
    profiler tptrace --torch ran: every aten:: op, exact count; self and total CPU time within
    1 ns per slice counted. Both come from Kineto's own ns timestamps: tptrace writes them
    shifted by one constant (the clock alignment) to whole ns, torch keeps them as float us;
    the only difference is the float's rounding. (Rows torch shows that tptrace cannot match:
    ProfilerStep* (tptrace drops the step prof.stop() leaves open) and the spans tptrace's own
    snippets ran in (Optimizer.step#..., its hook calls prof.step()): not aten:: ops.)"""
    ka = keyavg(name)
    r = rjson(path(name))
    ours = {o["name"]: o for o in r["ops"]["top"]}
    aten_t = {k for k in ka if k.startswith("aten::")}
    aten_o = {k for k in ours if k.startswith("aten::")}
    assert aten_t and aten_t == aten_o, (sorted(aten_t ^ aten_o))
    for k in sorted(aten_t):
        o, t = ours[k], ka[k]
        assert o["kind"] == "op" and o["count"] == t["count"], (k, o, t)
        tol = o["count"]
        assert abs(o["self_cpu_ns"] - t["self_cpu_us"] * 1000) <= tol, (k, o, t)
        assert abs(o["total_cpu_ns"] - t["cpu_total_us"] * 1000) <= tol, (k, o, t)
    # sorted by self CPU time, shares of the whole
    selfs = [o["self_cpu_ns"] for o in r["ops"]["top"]]
    assert selfs == sorted(selfs, reverse=True)
    assert r["ops"]["self_cpu_ns"] == sum(selfs)
    return r


def case_torch_cpu_only_report():
    """A --torch trace of a CPU-only torch job (no CUDA call at all): a report, exit 0 (it was
    exit 1: "no CUDA, NCCL or GPU events"), steps from its ProfilerStep#N slices, the
    operator breakdown equal to torch's own, GPU time unknown (never 0)."""
    t = load("torchcpu")
    assert not [e for e in t["traceEvents"] if e.get("cat") in ("cuda_runtime", "kernel")]
    r = check_against_torch("torchcpu")
    assert r["inputs"][0]["torch"] is True and r["inputs"][0]["gpu"] is False
    steps = sorted((a, b) for a, b, e in spans(t, "user_annotation")
                   if e["name"].startswith("ProfilerStep#"))
    assert steps, "no ProfilerStep#N in the saved trace"
    assert r["steps"]["method"] == "profiler_steps", r["steps"]
    got = [(s["start_ns"], s["start_ns"] + s["wall_ns"]) for s in r["steps"]["per_rank"][0]["steps"]]
    assert got == steps, (got, steps)
    assert r["ops"]["gpu"] is False
    for o in r["ops"]["top"]:
        assert o["gpu_total_ns"] is None and "no --gpu data" in o["gpu_total_ns_unknown"], o
    out = run(path("torchcpu")).stdout
    assert "Operators by self CPU time" in out and "aten::mm" in out, out
    long = [l for l in out.splitlines() if len(l) > 100]
    assert not long, long


def case_torch_gpu_ops():
    """--torch --gpu of torch_train.py with the simulated runtime: launch_phase (a
    record_function) launches one kernel a step through the runtime. GPU time per row: the
    kernels whose launch call (tptrace's probe, same thread) lies inside the row's slices,
    recomputed here from the raw events; the innermost row gets the self time. aten:: ops
    launch nothing here: their GPU time is a known 0."""
    t = load("torchgpu")
    r = check_against_torch("torchgpu")
    ours = {o["name"]: o for o in r["ops"]["top"]}
    kern = {e["args"]["correlation"]: e["dur"] for e in t["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") == "kernel"}
    launches = [(a, e) for a, b, e in spans(t, "cuda_runtime") if e["name"] == "cudaLaunchKernel"]

    def gpu_in(name):
        ns = n = 0
        for a, b, s in spans(t, "user_annotation"):
            if s["name"] != name:
                continue
            for x, e in launches:
                if e["tid"] == s["tid"] and a <= x < b:
                    ns += round(kern.get(e["args"]["correlation"], 0) * 1000)
                    n += 1
        return ns, n

    ns, n = gpu_in("launch_phase")
    lp = ours["launch_phase"]
    assert n >= 2 and lp["launches"] == n and lp["gpu_total_ns"] == ns, (lp, ns, n)
    assert lp["gpu_self_ns"] == ns, lp    # nothing nested in it launches
    assert r["ops"]["gpu"] is True
    for k, o in ours.items():
        if k.startswith("aten::"):
            assert o["gpu_total_ns"] == 0 and o["launches"] == 0, o


def case_compare_kernel_time_doubled():
    """--compare of two saved sim_job runs (tests/e2e/test_report_compare.py made them): 4
    fake_step kernels a step, 500 us before and 1000 us after. Every delta is the raw traces'
    own; the kernel's mean grows by the 500 us it was built to (the sim's device clock adds
    under 1 us a kernel)."""
    tb, ta = load("compare-500"), load("compare-1000")
    kb = [b - a for a, b, e in spans(tb, "kernel")]
    ka = [b - a for a, b, e in spans(ta, "kernel")]
    c = rjson("--compare", path("compare-500"), path("compare-1000"))
    k = c["kernels"][0]
    assert k["name"] == "fake_step" and len(c["kernels"]) == 1, c["kernels"]
    assert k["count"] == {"before": len(kb), "after": len(ka), "delta": 0, "delta_pct": 0}, k
    assert k["total_ns"]["delta"] == sum(ka) - sum(kb), k
    d = sum(ka) / len(ka) - sum(kb) / len(kb)
    assert near(k["mean_ns"]["delta"], d) and 499e3 < d < 501e3, k
    assert near(k["mean_ns"]["delta_pct"], 100 * d / (sum(kb) / len(kb))), k
    mb = [b - a for a, b in sync_steps(tb, "cudaEventSynchronize")]
    ma = [b - a for a, b in sync_steps(ta, "cudaEventSynchronize")]
    st = c["step_wall_ns"]["mean"]
    assert near(st["before"], sum(mb) / len(mb)) and near(st["after"], sum(ma) / len(ma)), st
    assert near(st["delta"], st["after"] - st["before"]) and st["delta"] >= 4 * 500e3 * 0.99, st
    assert c["ops"] is None and "trace with --torch" in c["ops_unknown"]
    # a torch run against itself: every op row in both, every delta 0
    c = rjson("--compare", path("torchgpu"), path("torchgpu"))
    assert c["ops"] and all(r["status"] == "both" and r["self_cpu_ns"]["delta"] == 0
                            for r in c["ops"]), c["ops"][:2]
    out = run("--compare", path("compare-500"), path("compare-1000")).stdout
    assert not [l for l in out.splitlines() if len(l) > 100], out


def main():
    for name, fn in sorted((k, v) for k, v in globals().items() if k.startswith("case_")):
        try:
            fn()
            print(f"ok {name[5:]}")
        except Exception as e:
            failures.append(name)
            print(f"FAIL {name[5:]}: {e!r}\n{traceback.format_exc(limit=2)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
