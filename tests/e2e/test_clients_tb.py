"""Tier 2: TensorBoard's PyTorch Profiler plugin (torch-tb-profiler, the test venv's) as a
client: a log directory of tptrace traces named as it expects (WORKER.pt.trace.json) goes
through the plugin's own parser and run generator (tests/clients/tb_run.py); its overview,
operator and kernel views come out without error and list the same kernels as `tptrace report`
(count and total per name) and the same operators as the trace's cpu_op events.

The plugin's conventions (README): it knows host calls by the old Kineto category "runtime"
(Kineto and tptrace write "cuda_runtime"), so its Runtime column stays 0 for torch 2.x's own
traces as for ours; and its steps come from ProfilerStep#N or else the span of the operators,
so a --gpu trace without --torch has no step in its overview (the Kernel view is the one to
read there)."""
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from gpulib import need_ptrace
from lib import (ROOT, TPTRACE, Lines, Tracer, Workload, fresh_tmp_path, load_trace, need_root,
                 tmp_path, trace_dir, venv_python, wait_until)
from test_report import HEALTHY, job_trace
from test_report_torch import report_json, traced
from test_torch import DEBIAN_PY, SIM_CUDART, TRAIN, need_torch

TB_RUN = os.path.join(ROOT, "tests", "clients", "tb_run.py")
sys.path.insert(0, os.path.dirname(TB_RUN))
from tb_run import rows  # noqa: E402  (the plugin's table as dicts)


def tb(paths, name):
    d = trace_dir(f"tb-{name}", paths, "worker{i}.pt.trace.json")
    p = subprocess.run([venv_python(), TB_RUN, d], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert sorted(out) == [f"worker{i}" for i in range(len(paths))], sorted(out)
    for w, r in out.items():
        assert not r["error"], f"the plugin failed on {w}:\n{r['error']}"
        assert r["overview"] and "performance" in r["overview"], r
    return out


def report_kernels(paths):
    p = subprocess.run([TPTRACE, "report", "--json"] + paths, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return {k["name"]: k for k in json.loads(p.stdout)["kernels"]["top"]}


def test_tb_gpu_trace_kernel_view():
    need_root()
    need_ptrace()
    venv_python()
    path = job_trace("healthy", HEALTHY)
    w = tb([path], "gpu")["worker0"]
    assert {"Overview", "Kernel"} <= set(w["views"]) and w["has_kernel"], w["views"]
    ours = report_kernels([path])
    theirs = {k["Name"]: k for k in w["kernels"]}
    assert set(theirs) == set(ours), (sorted(theirs), sorted(ours))
    for name, k in theirs.items():
        # the plugin shows whole microseconds
        assert k["Calls"] == ours[name]["count"], (k, ours[name])
        assert k["Total Duration (us)"] == round(ours[name]["total_ns"] / 1000), (k, ours[name])


def test_tb_torch_trace_operator_view():
    """Debian's torch 1.13 job (tests/workloads/torch_train.py on the simulated runtime),
    traced with --torch: the plugin's operator table is the trace's cpu_op events, its
    overview has the trace's steps"""
    need_torch()
    venv_python()
    out = fresh_tmp_path("tb-torch.json")
    # outlasts the window (killed after it); importing torch on a loaded host takes a while
    wl = Workload([DEBIAN_PY, TRAIN, "100000", tmp_path("tb-torch.times"), SIM_CUDART],
                  wait_ready=False)
    try:
        wl.wait_ready(300)
        wl.go()
        assert wl.out.wait_for(lambda l: l.startswith("step 20 "), 120), wl.err.text()
        tr = Tracer(["-p", str(wl.pid), "--torch", "-d", "2", "-o", out])
        assert tr.wait(180) == 0, tr.err.text()
    finally:
        wl.kill()
    w = tb([out], "torch")["worker0"]
    assert {"Overview", "Operator"} <= set(w["views"]), w["views"]
    trace = load_trace(out)
    ops = defaultdict(lambda: [0, 0.0])
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            ops[e["name"]][0] += 1
            ops[e["name"]][1] += e["dur"]
    assert ops, "the --torch trace has operators"
    theirs = {o["name"]: o for o in w["operators"]}
    assert set(theirs) == set(ops), sorted(set(theirs) ^ set(ops))[:20]
    # the plugin leaves out of its op tree an op that ends after the op enclosing it (and
    # with it some of its children); torch 1.13's own times (whole us, start and duration
    # rounded apart) have such ops, kept as they are in our trace. An operator none of whose
    # calls crosses its parent is counted exactly; one that has such calls loses at least those
    crossing = defaultdict(int)
    stack = []
    for e in sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and
                     e.get("cat") in ("cpu_op", "user_annotation")),
                    key=lambda e: (e["tid"], e["ts"], -e["dur"])):
        while stack and (stack[-1]["tid"] != e["tid"] or
                         stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]):
            stack.pop()
        if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"]:
            crossing[e["name"]] += 1
        stack.append(e)
    for name, (calls, total) in ops.items():
        if crossing[name]:
            assert theirs[name]["calls"] <= calls - crossing[name], \
                (name, theirs[name], calls, crossing[name])
        else:
            assert theirs[name]["calls"] == calls, (name, theirs[name], calls)
            assert abs(theirs[name]["host_total_duration"] - total) < 0.5, \
                (name, theirs[name], total)
    assert sum(1 for n in ops if not crossing[n]) > len(ops) // 2, dict(crossing)
    # the top ten by host time: the same operators, in the same order, among those the plugin
    # counts whole (an operator that lost calls to the plugin's tree lost their time too, so
    # next to one of nearly equal time its place depends on the run: div_ and sum seen swapped)
    exact = [n for n in ops if not crossing[n]]
    top = sorted(exact, key=lambda n: -ops[n][1])[:10]
    their_top = sorted(exact, key=lambda n: -theirs[n]["host_total_duration"])[:10]
    assert top == their_top, (top, their_top)
    # steps from the trace's ProfilerStep#N (--torch writes them from the optimizer hook)
    steps = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert steps and len(w["overview"]["steps"]["rows"]) == len(steps), \
        (len(steps), len(w["overview"]["steps"]["rows"]))
    for row in w["overview"]["performance"]:
        assert row["value"] > 0, row


TB_API = "/data/plugin/pytorch_profiler"
TB_AT = re.compile(r"^TensorBoard \S+ at http://127\.0\.0\.1:(\d+)/ ")


class TensorBoard:
    """`tensorboard --logdir D --host 127.0.0.1 --port 0` (the test venv's, as its users start
    it; loopback only, a port the kernel picks), known ready by its "TensorBoard V at URL"
    line; get(path) returns the decoded JSON of an HTTP 200, anything else fails."""

    def __init__(self, logdir):
        self.p = subprocess.Popen([venv_python(), "-m", "tensorboard.main", "--logdir", logdir,
                                   "--host", "127.0.0.1", "--port", "0"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.out, self.err = Lines(self.p.stdout), Lines(self.p.stderr)
        line = self.err.wait_for(TB_AT.match, 300)
        if not line:
            self.close()
            raise AssertionError(f"tensorboard never served: {self.err.text()[-3000:]}")
        self.url = f"http://127.0.0.1:{TB_AT.match(line).group(1)}"

    def get(self, path, **args):
        url = self.url + path + ("?" + urllib.parse.urlencode(args) if args else "")
        try:
            with urllib.request.urlopen(url, timeout=300) as r:
                body = r.read()
                if r.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                assert r.status == 200, (url, r.status)
                return body if path.endswith((".html", ".js")) else json.loads(body)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{url}: HTTP {e.code}: {e.read()[:2000]!r}\n"
                                 f"{self.err.text()[-3000:]}") from None

    def close(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()


def test_tb_http_server():
    """TensorBoard itself, over loopback HTTP, on a log directory of two runs: "gpu" (a --gpu
    trace of the simulated job) and "torch" (the test venv's torch 2.x job under --torch --gpu).
    Every view the plugin lists, its overview, operator and kernel endpoints answer without
    error; the kernel table is `tptrace report`'s kernels (count, total), the operator table
    its operators (calls, host total and self time), the top ten in the same order."""
    need_root()
    need_ptrace()
    venv_python()
    gpu = job_trace("healthy", HEALTHY)
    torch, _ = traced("tb_http_torch", gpu=True)
    logdir = tmp_path("tb-http")
    shutil.rmtree(logdir, ignore_errors=True)
    for run, path in (("gpu", gpu), ("torch", torch)):
        os.makedirs(os.path.join(logdir, run))
        shutil.copy(path, os.path.join(logdir, run, "worker0.pt.trace.json"))

    tb = TensorBoard(logdir)
    try:
        assert "pytorch_profiler" in tb.get("/data/plugins_listing")
        assert b"<html" in tb.get(TB_API + "/index.html").lower()
        # the plugin finds runs on its own schedule (a scan every 10 s, then a load each)
        runs = wait_until(lambda: (lambda r: not r["loading"] and sorted(r["runs"]) ==
                                   ["gpu", "torch"] and r)(tb.get(TB_API + "/runs")),
                          600, "the plugin to load both runs")
        assert runs["runs"], runs
        got = {}
        for run in ("gpu", "torch"):
            views = tb.get(TB_API + "/views", run=run)
            workers = tb.get(TB_API + "/workers", run=run, view=views[0])
            assert workers == ["worker0"], workers
            spans = tb.get(TB_API + "/spans", run=run, worker="worker0")
            assert len(spans) == 1, spans   # one file a worker: one span
            q = {"run": run, "worker": "worker0", "span": spans[0]}
            got[run] = {"views": views, "overview": tb.get(TB_API + "/overview", **q)}
            assert got[run]["overview"]["environments"][1]["value"] == "GPU", got[run]["overview"]
            if "Operator" in views:
                tb.get(TB_API + "/operation", group_by="Operation", **q)
                got[run]["ops"] = tb.get(TB_API + "/operation/table", group_by="Operation",
                                         **q)["data"]
            if "Kernel" in views:
                tb.get(TB_API + "/kernel", **q)
                tb.get(TB_API + "/kernel/table", group_by="Kernel", **q)
                got[run]["kernels"] = rows(tb.get(TB_API + "/kernel/table", group_by="Kernel",
                                                  **q))
        assert "ERROR" not in tb.err.text() and "Traceback" not in tb.err.text(), \
            tb.err.text()[-3000:]
    finally:
        tb.close()

    assert {"Overview", "Kernel"} <= set(got["gpu"]["views"]), got["gpu"]["views"]
    assert {"Overview", "Operator", "Kernel"} <= set(got["torch"]["views"]), got["torch"]["views"]
    for run, path in (("gpu", gpu), ("torch", torch)):
        ours = report_kernels([path])
        theirs = {k["Name"]: k for k in got[run]["kernels"]}
        assert theirs and set(theirs) == set(ours), (run, sorted(theirs), sorted(ours))
        for name, k in theirs.items():
            # the plugin shows whole microseconds
            assert k["Calls"] == ours[name]["count"], (run, k, ours[name])
            assert k["Total Duration (us)"] == round(ours[name]["total_ns"] / 1000), \
                (run, k, ours[name])
    r = report_json(torch)
    # the report's operators (its annotations, record_function and ProfilerStep, are not the
    # plugin's operators)
    ours = {o["name"]: o for o in r["ops"]["top"] if o["kind"] == "op"}
    theirs = {o["name"]: o for o in got["torch"]["ops"]}
    assert ours and set(ours) <= set(theirs), sorted(set(ours) - set(theirs))
    for name, o in ours.items():
        # the plugin sums the events' microseconds and shows the total rounded to whole us
        t = theirs[name]
        assert t["calls"] == o["count"], (name, t, o)
        assert abs(t["host_total_duration"] * 1000 - o["total_cpu_ns"]) <= 500, (name, t, o)
        assert abs(t["host_self_duration"] * 1000 - o["self_cpu_ns"]) <= 500, (name, t, o)
    top = sorted(ours, key=lambda n: -ours[n]["total_cpu_ns"])[:10]
    their_top = sorted((n for n in theirs if n in ours),
                       key=lambda n: -theirs[n]["host_total_duration"])[:10]
    assert top == their_top, (top, their_top)
