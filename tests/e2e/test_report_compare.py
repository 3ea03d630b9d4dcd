"""Tier 2: `tptrace report --compare BEFORE AFTER` of two runs of tests/workloads/sim_job.c on the
simulated stack that differ by construction: the same loop (12 steps of 4 fake_step kernels,
the healthy lagged sync), the kernels 500 us before and 1000 us after. The kernel rows'
deltas are the raw traces' (recomputed here) and what the jobs were built to differ by: the
same count, +500 us a kernel (the sim's device clock adds under 1 us to a kernel); the step
time's delta is the two sides' own step means (recomputed from the traces' syncs) (issue 26)."""
import json
import os
import subprocess

from lib import TPTRACE, WL, load_trace, need_root, tmp_path, trace_workload
from gpulib import need_ptrace

SIM_JOB = os.path.join(WL, "sim_job")
STEPS, KERNELS = 12, 4
_traces = {}


def job(us):
    if us not in _traces:
        need_root()
        need_ptrace()
        name = f"report-compare-{us}.json"
        trace_workload([SIM_JOB, "--steps", str(STEPS), "--kernel-us", str(us)],
                       tracer_args=["--gpu"], out_name=name)
        _traces[us] = tmp_path(name)
    return _traces[us]


def compare(*args, rc_want=0):
    p = subprocess.run([TPTRACE, "report", "--compare"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == rc_want, (p.returncode, p.stdout[-2000:], p.stderr)
    return p


def kernels_ns(path):
    t = load_trace(path)
    return [round(e["dur"] * 1000) for e in t["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"] == "fake_step"]


def step_mean(path):
    t = load_trace(path)
    base = t["tptrace"]["base_mono_ns"]
    ends = sorted(base + round((e["ts"] + e["dur"]) * 1000) for e in t["traceEvents"]
                  if e.get("ph") == "X" and e.get("name") == "cudaEventSynchronize")
    walls = [b - a for a, b in zip(ends, ends[1:])]
    return sum(walls) / len(walls), len(walls)


def test_report_compare_kernel_time_doubled():
    before, after = job(500), job(1000)
    c = json.loads(compare(before, after, "--json").stdout)
    assert c["tptrace_compare"] == 1
    assert c["before"]["inputs"] == [before] and c["after"]["inputs"] == [after]
    kb, ka = kernels_ns(before), kernels_ns(after)
    assert len(kb) == len(ka) == STEPS * KERNELS
    k = [r for r in c["kernels"] if r["name"] == "fake_step"]
    assert len(k) == 1 and k[0]["status"] == "both", c["kernels"]
    k = k[0]
    assert k["count"]["before"] == k["count"]["after"] == STEPS * KERNELS
    assert k["count"]["delta"] == 0 and k["count"]["delta_pct"] == 0
    assert k["total_ns"]["before"] == sum(kb) and k["total_ns"]["after"] == sum(ka), k
    assert k["total_ns"]["delta"] == sum(ka) - sum(kb)
    d = k["mean_ns"]["delta"]
    assert abs(d - (sum(ka) / len(ka) - sum(kb) / len(kb))) <= 1e-9 * d, k
    # by construction: +500 us a kernel; the sim's clock adds 0..1 us to each kernel
    assert all(500e3 <= x < 501e3 for x in kb) and all(1000e3 <= x < 1001e3 for x in ka)
    assert 499e3 < d < 501e3, k
    # (the JSON keeps 15-17 significant digits)
    assert abs(k["mean_ns"]["delta_pct"] - 100 * d / k["mean_ns"]["before"]) < 1e-9
    assert 99.6 < k["mean_ns"]["delta_pct"] < 100.2, k
    # the step time: each side's own mean, the delta theirs
    (mb, nb), (ma, na) = step_mean(before), step_mean(after)
    st = c["step_wall_ns"]["mean"]
    assert c["before"]["steps"] == nb and c["after"]["steps"] == na == STEPS - 1
    assert abs(st["before"] - mb) <= 1e-9 * mb and abs(st["after"] - ma) <= 1e-9 * ma, (st, mb, ma)
    assert abs(st["delta"] - (ma - mb)) <= 1e-9 * ma
    # (how much the step grew is not asserted: a loaded host stalls the sim's loop for tens of
    # ms now and then, in either run; the kernels' device time above is what was built)
    out = compare(before, after).stdout
    assert not [l for l in out.splitlines() if len(l) > 100], out
    assert "fake_step" in out and "+100.0%" in out.split("fake_step")[1].split("\n")[3], out
    # the page draws the same object
    html = tmp_path("report-compare.html")
    compare(before, after, "-o", html)
    assert os.path.getsize(html) > 0


def test_report_compare_sides_of_ranks():
    """A side of several traces: a comma list and a directory read the same; a run against
    itself has every delta 0 and every finding in both."""
    a, b = job(500), job(1000)
    d = tmp_path("report-compare-dir")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    for p in (a, b):
        os.symlink(p, os.path.join(d, os.path.basename(p)))
    c1 = json.loads(compare(f"{a},{b}", d, "--json").stdout)
    assert c1["before"]["inputs"] == [a, b]
    assert c1["after"]["inputs"] == sorted(os.path.join(d, os.path.basename(p)) for p in (a, b))
    assert c1["step_wall_ns"]["mean"]["delta"] == 0 and c1["step_wall_ns"]["p50"]["delta"] == 0
    assert all(r["count"]["delta"] == 0 and r["total_ns"]["delta"] == 0 for r in c1["kernels"])
    assert all(f["status"] == "both" for f in c1["findings"])
    # usage: one side only, an empty directory
    p = compare(a, rc_want=2)
    assert p.stderr.splitlines()[0] == ("tptrace report: --compare takes BEFORE and AFTER (a "
                                        "trace, a comma list, a directory), not 1")
    assert max(len(l) for l in p.stderr.splitlines()) <= 100, p.stderr
    empty = tmp_path("report-compare-empty")
    os.makedirs(empty, exist_ok=True)
    p = compare(a, empty, rc_want=1)
    assert p.stderr == f"tptrace report: {empty}: no trace (*.json, *.json.gz) in this directory\n"
