"""Tier 2: GPU memory (`tptrace mem`, user/mem/memtrace.c + user/mem/memsnap.c) on the simulated caching
allocator (tests/sim/alloc: USDT pytorch:malloc/free) and runtime, and entry decoding of the
REAL libcudart.so.13's allocation calls. Exact sizes, pointers and counts come from the
workloads' headers (tests/workloads/alloc_app.c, tests/e2e/progs/mem_real_args.c).

`tptrace mem` is the product binary's subcommand."""
import json
import os
import pickle
import re
import signal
import subprocess
import sys

from lib import (E2E_BIN, OUT, ROOT, TPTRACE, WL, Lines, Skip, Workload, load_trace, need_root,
                 tmp_path, venv_python)

sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import memsnap_check  # noqa: E402  (tests/tools: memory_viz's replay, every event)
sys.path.insert(0, os.path.join(ROOT, "tests", "clients"))
import memviz_torch  # noqa: E402  (PyTorch's own memory_viz command line, torch 2.x)

ALLOC_APP = os.path.join(WL, "alloc_app")
MIB = 1 << 20


class MemTracer:
    """`tptrace mem` in the background, started once its probes are attached."""

    def __init__(self, args, timeout=30, env=None):
        self.p = subprocess.Popen([TPTRACE, "mem"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=dict(os.environ, **(env or {})))
        self.out = Lines(self.p.stdout)
        self.err = Lines(self.p.stderr)
        line = self.err.wait_for(lambda l: l.startswith("tptrace: tracing GPU memory"), timeout)
        if not line:
            self.p.kill()
            self.p.wait()
            raise AssertionError(f"tptrace mem did not start: {self.err.text()}")
        self.started = line

    def stop(self, timeout=30):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        return self.wait(timeout)

    def wait(self, timeout=30):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError(f"tptrace mem did not exit: {self.err.text()}")
        self.out.t.join(5)
        self.err.t.join(5)
        return rc


def infos(wl):
    """The workload's '# ...' info lines, split."""
    return [l[2:].split() for l in wl.out.text().splitlines() if l.startswith("# ")]


def run_alloc(scenario, args, name, env=None, hold=False, tracer_env=None):
    """alloc_app <scenario>: attach, GO, DONE, end (SIGINT with --hold, else the exit)."""
    need_root()
    wl = Workload([ALLOC_APP, "--scenario", scenario] + (["--hold"] if hold else []), env=env)
    try:
        tr = MemTracer(["-p", str(wl.pid)] + args, env=tracer_env)
        wl.go()
        wl.wait_done()
        if hold:
            rc = tr.stop()
            wl.finish()
        else:
            wl.finish()
            rc = tr.wait()
        assert rc == 0, f"tptrace mem rc={rc}: {tr.err.text()}"
    finally:
        wl.kill()
    return wl, tr


def mallocs(wl):
    return [(int(f[1], 16), int(f[2])) for f in infos(wl) if f[0] == "malloc"]


def direct(wl, api):
    return [(int(f[1], 16), int(f[2])) for f in infos(wl) if f[0] == api][0]


def stream_of(wl):
    return [int(f[1], 16) for f in infos(wl) if f[0] == "stream"][0]


_viz_runs = [0]


def check_torch_memory_viz(snap, path=None):
    """PyTorch's memory_viz command line (the test venv's torch 2.x) reads the snapshot and
    says what it says; `path`: the pickle tptrace wrote, else the snapshot pickled as torch
    dumps its own. Where PyPI could not be reached there is no venv: said, the rest checked."""
    try:
        py = venv_python()
    except Skip as e:
        print(f"memory_viz command line not run: {e}")
        return
    _viz_runs[0] += 1
    errors = memviz_torch.check(snap, py, tmp_path(f"memviz-{os.getpid()}-{_viz_runs[0]}"), path)
    assert not errors, "PyTorch's memory_viz disagrees:\n" + "\n".join(errors)


def check_viz_fields(snap, path=None):
    """What memory_viz reads, with the types it expects."""
    assert set(snap) >= {"segments", "device_traces", "allocator_settings"}, snap.keys()
    assert isinstance(snap["device_traces"], list) and len(snap["device_traces"]) >= 1
    actions = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
               "segment_map", "segment_unmap", "oom"}
    for trace in snap["device_traces"]:
        last = 0
        for e in trace:
            assert e["action"] in actions, e
            for k in ("addr", "size", "stream", "time_us"):
                assert isinstance(e[k], int) and e[k] >= (-1 if k == "stream" else 0), (k, e)
            assert e["time_us"] >= last, "time_us never goes back"
            last = e["time_us"]
            for f in e["frames"]:
                assert set(f) == {"filename", "line", "name"} and isinstance(f["line"], int), f
    for s in snap["segments"]:
        for k in ("device", "address", "total_size", "allocated_size", "active_size",
                  "requested_size", "stream"):
            assert isinstance(s[k], int), (k, s)
        assert s["segment_type"] in ("small", "large")
        cursor = s["address"]
        for b in s["blocks"]:
            assert b["address"] == cursor, "blocks tile the segment"
            assert b["state"] in ("active_allocated", "active_pending_free", "inactive")
            cursor += b["size"]
        assert cursor == s["address"] + s["total_size"]
        assert s["allocated_size"] == sum(b["size"] for b in s["blocks"]
                                          if b["state"] == "active_allocated")
    assert "tptrace" in snap and "unknown" in snap["tptrace"]
    errors = memsnap_check.check(snap)
    assert not errors, "memory_viz cannot replay the snapshot:\n" + "\n".join(errors[:10])
    assert all(v == 0 for v in snap["tptrace"]["left_out"].values()), snap["tptrace"]["left_out"]
    check_torch_memory_viz(snap, path)


def mem_events(trace, name):
    return [e for e in trace["traceEvents"] if e.get("cat") == "cuda_memory" and e["name"] == name]


def counter(trace, name):
    return [e["args"]["bytes"] for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == name]


def test_mem_normal_trace_and_snapshot():
    snap_path, trace_path = tmp_path("mem-normal.json"), tmp_path("mem-normal-trace.json")
    wl, tr = run_alloc("normal", ["-o", snap_path, "--trace", trace_path], "normal")
    # the sim runtime maps the sim driver underneath (as the real one): its probes are live,
    # and the driver calls nested in cudaMalloc/cudaFree are not recorded twice (counts below)
    assert "2 USDT probes, 11 runtime and 8 driver functions" in tr.started, tr.started
    blocks = mallocs(wl)
    S = stream_of(wl)
    assert [s for _, s in blocks] == [1000] * 3 + [3145728] * 2 + [16777216]
    seg_ptrs = [blocks[0][0], blocks[3][0], blocks[5][0]]
    seg_sizes = [2 * MIB, 20 * MIB, 16 * MIB]

    trace = load_trace(trace_path)
    names = {}
    for e in trace["traceEvents"]:
        if e.get("cat") == "cuda_memory" and e["ph"] == "i" and e["name"] != "[memory]":
            names[e["name"]] = names.get(e["name"], 0) + 1
    assert names == {"cudaMalloc": 3, "cudaFree": 4, "cudaMallocHost": 1, "cudaHostAlloc": 1,
                     "cudaFreeHost": 2, "cudaMallocManaged": 1, "cudaMallocAsync": 1,
                     "cudaFreeAsync": 1}, names
    cm = mem_events(trace, "cudaMalloc")
    assert [(e["args"]["size"], int(e["args"]["ptr"], 16), e["args"]["rc"]) for e in cm] == \
        list(zip(seg_sizes, seg_ptrs, [0, 0, 0]))
    assert all(e["pid"] == wl.pid and e["args"]["device"] == 0 for e in cm)
    host = direct(wl, "cudaHostAlloc")
    ha = mem_events(trace, "cudaHostAlloc")[0]["args"]
    assert (ha["size"], int(ha["ptr"], 16), ha["flags"], ha["rc"]) == (8192, host[0], 1, 0)
    mm = mem_events(trace, "cudaMallocManaged")[0]["args"]
    assert (mm["size"], int(mm["ptr"], 16), mm["flags"]) == (16384, direct(wl, "cudaMallocManaged")[0], 1)
    ma = mem_events(trace, "cudaMallocAsync")[0]["args"]
    assert (ma["size"], int(ma["ptr"], 16), int(ma["stream"], 16)) == (65536, direct(wl, "cudaMallocAsync")[0], S)
    fa = mem_events(trace, "cudaFreeAsync")[0]["args"]
    assert (int(fa["ptr"], 16), int(fa["stream"], 16)) == (direct(wl, "cudaMallocAsync")[0], S)
    frees = [int(e["args"]["ptr"], 16) for e in mem_events(trace, "cudaFree")]
    assert frees == [direct(wl, "cudaMallocManaged")[0]] + seg_ptrs[::-1], frees

    mem = [(e["args"]["action"], int(e["args"]["Addr"], 16), e["args"]["Bytes"])
           for e in mem_events(trace, "[memory]")]
    allocs = [(a, b) for act, a, b in mem if act == "alloc"]
    assert allocs == blocks, allocs
    assert [(a, -b) for act, a, b in mem if act == "free"] == blocks
    allocated = counter(trace, "bytes allocated (cuda:0)")
    assert max(allocated) == 3 * 1000 + 2 * 3145728 + 16777216 == 23071672
    assert allocated[:3] == [1000, 2000, 3000] and allocated[-1] == 0
    reserved = counter(trace, "bytes reserved (cuda:0)")
    assert max(reserved) == 38 * MIB + 65536 and reserved[-1] == 0, reserved
    assert counter(trace, "bytes pinned host")[-1] == 0 and max(counter(trace, "bytes pinned host")) == 8192
    assert max(counter(trace, "bytes managed")) == 16384
    meta = trace["tptrace"]["memory"]
    assert meta["events_dropped"] == 0 and meta["usdt_probes"] == 2 and meta["calls"] == 14
    assert meta["allocs"] == meta["frees"] == 6 and meta["frees_unknown"] == 0

    snap = json.load(open(snap_path))
    check_viz_fields(snap)
    assert len(snap["device_traces"]) == 1 and snap["segments"] == []
    t = snap["device_traces"][0]
    acts = [e["action"] for e in t]
    assert acts == ["segment_alloc", "alloc", "alloc", "alloc", "segment_alloc", "alloc", "alloc",
                    "segment_alloc", "alloc"] + ["free_requested", "free_completed"] * 6 + \
        ["segment_alloc", "segment_free"] + ["segment_free"] * 3, acts
    assert [(e["addr"], e["size"]) for e in t if e["action"] == "alloc"] == blocks
    assert [(e["addr"], e["size"]) for e in t if e["action"] == "segment_alloc"] == \
        list(zip(seg_ptrs, seg_sizes)) + [(direct(wl, "cudaMallocAsync")[0], 65536)]
    assert [(e["addr"], e["size"]) for e in t if e["action"] == "segment_free"][1:] == \
        list(zip(seg_ptrs, seg_sizes))[::-1]
    assert all(e["stream"] == S for e in t if e["action"] == "alloc")
    for e in t:
        if e["action"] == "alloc":
            names = [f["name"] for f in e["frames"]]
            assert names[0].startswith("tpsim_alloc_malloc+"), names
            assert any(n.startswith("main+") for n in names), names
    dev = snap["tptrace"]["devices"][0]
    assert (dev["bytes_allocated"], dev["bytes_reserved"]) == (0, 0)
    assert (dev["peak_bytes_allocated"], dev["peak_bytes_reserved"]) == (23071672, 38 * MIB + 65536)
    assert snap["tptrace"]["counts"]["allocs"] == 6 and snap["tptrace"]["pid"] == wl.pid


SIZE = r"(\d+ B|\d+\.\d KiB|\d+\.\d MiB|\d+\.\d\d GiB)"
LEAK_LINE = re.compile(rf"^  {SIZE}: (\d+) x {SIZE}  cuda:(\d+)  (\S+)  at (\S+) \((\S+)\)$")


def test_mem_leaks_by_call_site():
    snap_path = tmp_path("mem-leak.json")
    wl, tr = run_alloc("leak", ["--leaks", "-o", snap_path], "leak", hold=True)
    blocks = mallocs(wl)
    report = tr.out.text()
    groups = [LEAK_LINE.match(l).groups() for l in report.splitlines() if LEAK_LINE.match(l)]
    tensor = [g for g in groups if g[4] == "pytorch:malloc"]
    assert len(tensor) == 2, report
    (t1, n1, s1, d1, _, site1, obj1), (t2, n2, s2, d2, _, site2, obj2) = tensor
    assert (t1, int(n1), s1, d1) == ("4.0 MiB", 2, "2.0 MiB", "0"), report
    assert site1.startswith("leak_site_b+") and obj1 == "alloc_app", report
    assert (t2, int(n2), s2, d2) == ("12.0 KiB", 3, "4.0 KiB", "0"), report
    assert site2.startswith("leak_site_a+") and obj2 == "alloc_app", report
    assert "tensor blocks (pytorch:malloc): 5 live, 4.0 MiB" in report, report
    assert "segments and direct allocations (cudaMalloc & co): 2 live, 22.0 MiB" in report, report
    assert "native stacks only: Python stacks with --py-stacks" in report

    snap = json.load(open(snap_path))
    check_viz_fields(snap)
    live = snap["tptrace"]["live_by_call_site"]
    assert [(g["what"], g["count"], g["size"]) for g in live[:2]] == \
        [("cudaMalloc", 1, 20 * MIB), ("pytorch:malloc", 2, 2097152)], live
    segs = sorted(snap["segments"], key=lambda s: s["total_size"])
    assert [(s["total_size"], s["segment_type"], s["allocated_size"], s["requested_size"])
            for s in segs] == [(2 * MIB, "small", 3 * 4096, 3 * 4096),
                               (20 * MIB, "large", 2 * 2097152, 2 * 2097152)], segs
    small_live = [(b["address"], b["size"]) for b in segs[0]["blocks"] if b["state"] == "active_allocated"]
    assert small_live == blocks[:3], small_live
    large_live = [(b["address"], b["requested_size"]) for b in segs[1]["blocks"] if b["state"] == "active_allocated"]
    assert large_live == blocks[3:5], large_live
    # the transient 8192 block came and went
    acts = [(e["action"], e["size"]) for e in snap["device_traces"][0] if e["addr"] == blocks[5][0]]
    assert acts == [("alloc", 8192), ("free_requested", 8192), ("free_completed", 8192)], acts


def test_mem_oom():
    snap_path, trace_path = tmp_path("mem-oom.json"), tmp_path("mem-oom-trace.json")
    wl, tr = run_alloc("oom", ["-o", snap_path, "--trace", trace_path], "oom",
                       env={"TPSIM_MEM_LIMIT_BYTES": str(64 * MIB)})
    assert ["oom", "33554432"] in infos(wl)
    trace = load_trace(trace_path)
    cm = [(e["args"]["size"], e["args"]["rc"]) for e in mem_events(trace, "cudaMalloc")]
    assert cm == [(40 * MIB, 0), (48 * MIB, 2), (48 * MIB, 0), (32 * MIB, 2)], cm
    ooms = mem_events(trace, "OOM")
    assert [(e["ph"], e["s"], e["args"]["api"], e["args"]["size"], e["args"]["rc"], e["args"]["device"])
            for e in ooms] == [("i", "p", "cudaMalloc", 48 * MIB, 2, 0), ("i", "p", "cudaMalloc", 32 * MIB, 2, 0)]
    # the first OOM finds the freed 40 MiB segment still cached, the second the 48 MiB one in use
    assert [(e["args"]["bytes allocated"], e["args"]["bytes reserved"]) for e in ooms] == \
        [(0, 40 * MIB), (48 * MIB, 48 * MIB)]
    assert trace["tptrace"]["memory"]["ooms"] == 2
    snap = json.load(open(snap_path))
    check_viz_fields(snap)
    t = snap["device_traces"][0]
    assert [e["action"] for e in t] == ["segment_alloc", "alloc", "free_requested", "free_completed",
                                        "oom", "segment_free", "segment_alloc", "alloc", "oom",
                                        "free_requested", "free_completed", "segment_free"]
    assert [e["size"] for e in t if e["action"] == "oom"] == [48 * MIB, 32 * MIB]
    # free device memory at the OOM is not known, and said so
    assert all(e["tptrace_device_free_known"] is False for e in t if e["action"] == "oom")
    assert snap["tptrace"]["counts"]["ooms"] == 2


def test_mem_snapshot_pickle_round_trip():
    json_path, pkl_path = tmp_path("mem-rt.json"), tmp_path("mem-rt.pickle")
    wl, tr = run_alloc("leak", ["-o", pkl_path, "--pickle"], "pickle", hold=True)
    raw = open(pkl_path, "rb").read()
    assert raw[:2] == b"\x80\x02" and raw[-1:] == b"."
    snap = pickle.loads(raw)
    check_viz_fields(snap, pkl_path)
    # the pool id as PyTorch pickles it: a tuple, (0, 0) for the default pool
    assert snap["segments"] and all(type(s["segment_pool_id"]) is tuple and s["segment_pool_id"] == (0, 0)
                                    for s in snap["segments"])
    # the same document as JSON (where a tuple is a list), through a JSON round trip
    again = json.loads(json.dumps(snap))
    for s in again["segments"]:
        s["segment_pool_id"] = tuple(s["segment_pool_id"])
    assert again == snap
    blocks = mallocs(wl)
    live = sorted((b["address"], b["requested_size"]) for s in snap["segments"] for b in s["blocks"]
                  if b["state"] == "active_allocated")
    assert live == sorted(blocks[:5]), live
    assert snap["tptrace"]["attach_unix_ns"] < snap["tptrace"]["end_unix_ns"]


def test_mem_real_cudart_entry_args():
    """The real libcudart.so.13: without a driver every call fails, its entry is observed."""
    need_root()
    prog = os.path.join(E2E_BIN, "mem_real_args")
    trace_path = tmp_path("mem-real.json")
    wl = Workload([prog])
    try:
        tr = MemTracer(["-p", str(wl.pid), "--trace", trace_path])
        assert " runtime" in tr.started and "0 runtime" not in tr.started, tr.started
        wl.go()
        wl.wait_done()
        wl.finish()
        assert tr.wait() == 0, tr.err.text()
    finally:
        wl.kill()
    rcs = {f[1]: int(f[2]) for f in infos(wl) if f[0] == "rc"}
    assert all(rc != 0 for rc in rcs.values()), rcs
    trace = load_trace(trace_path)
    ev = {}
    for e in trace["traceEvents"]:
        if e.get("cat") == "cuda_memory" and e["ph"] == "i" and e["name"] != "[memory]":
            assert e["name"] not in ev, f"{e['name']} recorded twice"
            ev[e["name"]] = e["args"]
    assert set(ev) == set(rcs), (ev.keys(), rcs)
    for name, rc in rcs.items():
        assert ev[name]["rc"] == rc, (name, ev[name], rc)
    assert ev["cudaMalloc"]["size"] == 1111
    assert (ev["cudaMallocAsync"]["size"], ev["cudaMallocAsync"]["stream"]) == (2222, "0x5100")
    assert ev["cudaMallocHost"]["size"] == 3333
    assert (ev["cudaHostAlloc"]["size"], ev["cudaHostAlloc"]["flags"]) == (4444, 2)
    assert (ev["cudaMallocManaged"]["size"], ev["cudaMallocManaged"]["flags"]) == (5555, 2)
    assert ev["cudaFree"]["ptr"] == "0xdead000"
    assert (ev["cudaFreeAsync"]["ptr"], ev["cudaFreeAsync"]["stream"]) == ("0xbeef000", "0x5200")
    assert ev["cudaFreeHost"]["ptr"] == "0xcafe000"
    assert ev["cudaSetDevice"]["device"] == 3
    meta = trace["tptrace"]["memory"]
    assert meta["failed_calls"] == len(rcs) and meta["ooms"] == 0 and meta["segment_allocs"] == 0


def test_mem_cli_errors():
    p = subprocess.run([TPTRACE, "mem", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "EXAMPLES:" in p.stdout and "--leaks" in p.stdout, p.stdout
    p = subprocess.run([TPTRACE, "mem"], capture_output=True, text=True)
    assert p.returncode == 2 and "no process given: use -p PID" in p.stderr, p.stderr
    p = subprocess.run([TPTRACE, "mem", "-p", "x"], capture_output=True, text=True)
    assert p.returncode == 2 and "invalid pid 'x'" in p.stderr, p.stderr
    p = subprocess.run([TPTRACE, "mem", "-p", "1", "--pickle"], capture_output=True, text=True)
    assert p.returncode == 2 and "--pickle needs -o FILE" in p.stderr, p.stderr
    p = subprocess.run([TPTRACE, "mem", "-p", "999999999"], capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr == "tptrace: pid 999999999: no such process\n", p.stderr
    need_root()
    wl = Workload([os.path.join(WL, "nocuda")])
    try:
        p = subprocess.run([TPTRACE, "mem", "-p", str(wl.pid), "-d", "1"], capture_output=True, text=True,
                           timeout=30)
    finally:
        wl.kill()
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        f"tptrace: pid {wl.pid} (nocuda) has no CUDA runtime, CUDA driver or PyTorch allocator "
        "probes loaded; use --wait to wait for them"), p.stderr
    # an output that cannot be written is refused before anything is attached (it used to be
    # found out at the end, the whole trace lost), as `tptrace -p` and `stacks` refuse it
    wl = Workload([ALLOC_APP, "--scenario", "normal", "--hold"])
    try:
        p = subprocess.run([TPTRACE, "mem", "-p", str(wl.pid), "-d", "1", "-o", "/nonexistent/dir/x.json"],
                           capture_output=True, text=True, timeout=60)
    finally:
        wl.kill()
    assert p.returncode == 1 and p.stderr == \
        "tptrace: cannot write /nonexistent/dir/x.json: No such file or directory\n", p.stderr


def test_trace_with_mem_counters():
    """tptrace -p PID --mem: the CUDA trace plus memory counter tracks in the same file."""
    need_root()
    from lib import calls, check_valid_trace, trace_workload
    trace, wl, tr = trace_workload([ALLOC_APP, "--scenario", "normal"], tracer_args=["--mem"],
                                   out_name="trace-mem.json")
    check_valid_trace(trace)
    counters = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "C" and e["pid"] == wl.pid:
            for k, v in e["args"].items():
                counters.setdefault(e["name"], []).append(v)
    allocated = [n for n in counters if n.startswith("bytes allocated")]
    reserved = [n for n in counters if n.startswith("bytes reserved")]
    assert allocated and reserved, sorted(counters)
    assert max(counters[allocated[0]]) == 23071672
    assert max(counters[reserved[0]]) == 39911424
    assert counters[allocated[0]][-1] == 0 and counters[reserved[0]][-1] == 0
    # the runtime calls are still in the trace, and memory metadata is at the top level
    assert calls(trace, pid=wl.pid, name="cudaStreamSynchronize")
    assert "tptrace_memory" in trace


def test_trace_with_mem_single_probe_links():
    """Without uprobe_multi (kernels before 6.6) the memory probes attach one by one through the
    same attacher and record the same calls as with one link per library."""
    need_root()
    from lib import check_valid_trace, trace_workload

    def run(env, name):
        trace, wl, tr = trace_workload([ALLOC_APP, "--scenario", "normal"], tracer_args=["--mem"],
                                       out_name=name, tracer_env=env)
        check_valid_trace(trace)
        names = {}
        for e in trace["traceEvents"]:
            if e.get("cat") == "cuda_memory" and e["ph"] == "i" and e["name"] != "[memory]":
                names[e["name"]] = names.get(e["name"], 0) + 1
        return trace["tptrace_memory"], names

    multi, multi_names = run(None, "mem-multi.json")
    single, single_names = run({"TPTRACE_NO_UPROBE_MULTI": "1"}, "mem-single.json")
    for m in (multi, single):
        assert (m["usdt_probes"], m["runtime_probes"], m["attach_errors"]) == (2, 11, 0), m
    assert single_names == multi_names == {
        "cudaMalloc": 3, "cudaFree": 4, "cudaMallocHost": 1, "cudaHostAlloc": 1,
        "cudaFreeHost": 2, "cudaMallocManaged": 1, "cudaMallocAsync": 1,
        "cudaFreeAsync": 1}, (single_names, multi_names)
    assert (single["allocs"], single["frees"]) == (multi["allocs"], multi["frees"]) == (6, 6), \
        (single, multi)


def test_mem_snapshot_allocator_settings_from_environment():
    """The snapshot's allocator_settings come from the target's own environment:
    PYTORCH_CUDA_ALLOC_CONF wins over PYTORCH_ALLOC_CONF; unset is said, not guessed."""
    cases = [({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64",
               "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "expandable_segments:True"),
             ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"}, "max_split_size_mb:64"),
             ({}, "")]
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        os.environ.pop(k, None)  # workloads inherit the runner's environment
    for i, (env, want) in enumerate(cases):
        snap_path = tmp_path(f"mem-conf-{i}.json")
        run_alloc("normal", ["-o", snap_path], f"conf{i}", env=env)
        with open(snap_path) as f:
            s = json.load(f)["allocator_settings"]
        assert s["PYTORCH_CUDA_ALLOC_CONF"] == want, (env, s)
        assert s["expandable_segments"] is (want == "expandable_segments:True"), s
        assert s["tptrace_source"] == ("environment of the process" if want else
                                       "PYTORCH_CUDA_ALLOC_CONF not set in the process: defaults"), s


def test_mem_pre_attach_segments():
    """Blocks in segments allocated before attach, some freed while tracing: inferred
    segments hold every one of them, memory_viz replays every event."""
    snap_path = tmp_path("mem-preattach.json")
    wl, tr = run_alloc("preattach", ["-o", snap_path], "preattach", hold=True)
    before = [(int(f[1], 16), int(f[2])) for f in infos(wl) if f[0] == "before"]
    blocks = mallocs(wl)
    assert [s for _, s in blocks] == [1000, 1000, 3145728, 2048, 33554432], blocks
    d, e, f, g, y = blocks
    assert d[0] == before[0][0] and y[0] == before[3][0], "d and y reuse a's and x's addresses"
    assert ["released", "1"] in infos(wl)
    snap = json.load(open(snap_path))
    check_viz_fields(snap)
    c = snap["tptrace"]["counts"]
    assert (c["allocs"], c["frees"], c["frees_unknown"], c["segment_allocs"],
            c["segment_frees_unknown"]) == (5, 3, 2, 0, 1), c
    t = snap["device_traces"][0]
    assert [e_["action"] for e_ in t] == ["alloc", "alloc", "free_requested", "free_completed",
                                         "alloc", "free_requested", "free_completed", "alloc",
                                         "alloc", "free_requested", "free_completed", "segment_free"]
    # empty_cache() returned y's segment: its inferred segment ends there, nothing else does
    assert [e_.get("tptrace_inferred", False) for e_ in t] == [False] * 11 + [True]
    assert (t[-1]["addr"], t[-1]["size"]) == y
    segs = snap["segments"]
    assert y[0] not in [s["address"] for s in segs]
    assert segs and all(s["tptrace_inferred"] and s["tptrace_source"] == "before_attach" for s in segs)
    live = sorted((b["address"], b["requested_size"]) for s in segs for b in s["blocks"]
                  if b["state"] == "active_allocated")
    assert live == sorted([e, g]), live
    # every address an event names, but y's, lies in a final segment (alive all along)
    for ev in t:
        if ev["addr"] == y[0]:
            continue
        assert any(s["address"] <= ev["addr"] < s["address"] + s["total_size"] for s in segs), ev
    # the freed 3 MiB block's segment: it only ever held that block
    big = [s for s in segs if s["address"] == f[0]]
    assert big and big[0]["total_size"] == 3145728 and big[0]["allocated_size"] == 0, big


def test_mem_no_stacks():
    """--no-stacks: no frames anywhere, the same exact events and counts."""
    snap_path = tmp_path("mem-nostacks.json")
    wl, tr = run_alloc("normal", ["-o", snap_path, "--no-stacks"], "nostacks")
    snap = json.load(open(snap_path))
    check_viz_fields(snap)
    t = snap["device_traces"][0]
    assert [e["action"] for e in t] == ["segment_alloc", "alloc", "alloc", "alloc", "segment_alloc",
                                        "alloc", "alloc", "segment_alloc", "alloc"] + \
        ["free_requested", "free_completed"] * 6 + ["segment_alloc", "segment_free"] + ["segment_free"] * 3
    assert [(e["addr"], e["size"]) for e in t if e["action"] == "alloc"] == mallocs(wl)
    assert all(e["frames"] == [] for e in t), [e["frames"] for e in t if e["frames"]][:1]
    assert all(g["frames"] == [] and g["call_site"] == "" for g in snap["tptrace"]["live_by_call_site"])
    c = snap["tptrace"]["counts"]
    assert (c["allocs"], c["frees"], c["segment_allocs"], c["segment_frees"]) == (6, 6, 7, 7), c
    # with stacks (the default) the same run has frames: the option is what removed them
    snap_path2 = tmp_path("mem-stacks.json")
    run_alloc("normal", ["-o", snap_path2], "stacks")
    t2 = json.load(open(snap_path2))["device_traces"][0]
    assert all(e["frames"] for e in t2 if e["action"] == "alloc")


def test_mem_alloc_conf_from_target():
    """PYTORCH_CUDA_ALLOC_CONF comes from the target's environment, not tptrace's."""
    conf = "expandable_segments:True,max_split_size_mb:128"
    snap_path = tmp_path("mem-conf.json")
    run_alloc("leak", ["-o", snap_path], "conf", hold=True,
              env={"PYTORCH_CUDA_ALLOC_CONF": conf},
              tracer_env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:1"})
    snap = json.load(open(snap_path))
    check_viz_fields(snap)
    st = snap["allocator_settings"]
    assert st["PYTORCH_CUDA_ALLOC_CONF"] == conf, st
    assert st["expandable_segments"] is True and st["tptrace_source"] == "environment of the process", st
    # unset in the target: the defaults, said so
    snap_path = tmp_path("mem-noconf.json")
    saved = os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    try:
        run_alloc("leak", ["-o", snap_path], "noconf", hold=True,
                  tracer_env={"PYTORCH_CUDA_ALLOC_CONF": conf})
    finally:
        if saved is not None:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = saved
    st = json.load(open(snap_path))["allocator_settings"]
    assert st["PYTORCH_CUDA_ALLOC_CONF"] == "" and st["expandable_segments"] is False, st
    assert "not set" in st["tptrace_source"], st


VMM_APP = os.path.join(WL, "vmm_app")
NESTED_APP = os.path.join(WL, "mem_nested_app")


def run_driver_workload(argv, name):
    """A driver workload under `tptrace mem -o SNAP --trace TRACE`: (wl, tracer, trace, snapshot)."""
    need_root()
    snap_path, trace_path = tmp_path(name + ".json"), tmp_path(name + "-trace.json")
    wl = Workload(argv)
    try:
        tr = MemTracer(["-p", str(wl.pid), "-o", snap_path, "--trace", trace_path])
        wl.go()
        wl.wait_done()
        wl.finish()
        assert tr.wait() == 0, tr.err.text()
    finally:
        wl.kill()
    return wl, tr, load_trace(trace_path), json.load(open(snap_path))


def mem_calls(trace):
    return [(e["name"], e["args"]) for e in trace["traceEvents"]
            if e.get("cat") == "cuda_memory" and e["ph"] == "i" and e["name"] != "[memory]"]


def test_mem_wait_runtime_loaded_later():
    """tptrace mem --wait on a process with no CUDA yet: the session's rescans find the runtime
    it dlopens later, the memory probes go on it, and its allocation is in the snapshot."""
    need_root()
    snap_path = tmp_path("mem-wait.json")
    wl = Workload([os.path.join(WL, "dlopen_app"), "--iters", "1", "--wait-line",
                   "--lib", os.path.join(OUT, "sim", "lib", "libcudart.so.13"),
                   "--malloc", str(2 * MIB)])
    p = None
    try:
        p = subprocess.Popen([TPTRACE, "mem", "-p", str(wl.pid), "--wait", "-o", snap_path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err = Lines(p.stderr)
        assert err.wait_for(lambda l: l.startswith(f"tptrace: waiting for pid {wl.pid}"), 30), \
            err.text()
        wl.go()
        assert wl.out.wait_for(lambda l: l == "# loaded", 30), wl.out.text()
        assert err.wait_for(lambda l: l == f"tptrace: pid {wl.pid} loaded CUDA or PyTorch; tracing",
                            30), err.text()
        wl.go()     # the go-on line: allocate now
        wl.wait_done()
        wl.finish()
        assert p.wait(60) == 0, err.text()
    finally:
        wl.kill()
        if p and p.poll() is None:
            p.kill()
            p.wait()
    info = {f[0]: f[1:] for f in infos(wl)}
    ptr = int(info["malloc"][0], 16)
    snap = json.load(open(snap_path))
    assert [(e["action"], e["addr"], e["size"]) for e in snap["device_traces"][0]] == [
        ("segment_alloc", ptr, 2 * MIB), ("segment_free", ptr, 2 * MIB)], snap["device_traces"]


def test_mem_nested_rule_twins_agree():
    """The nested-call rule has two implementations: target__call_nesting (user space, by the
    return address) for the trace writer and the recorder, and bpf/mem.bpf.c's (in the kernel,
    by the runtime calls open on the thread) for the memory tracer. `tptrace --mem` runs both
    on one process whose runtime calls each make one driver call, as its direct driver calls
    do not: each writes the runtime calls and the direct driver calls, and counts each runtime
    call's driver call as nested, once."""
    need_root()
    from lib import calls, trace_workload
    trace, wl, tr = trace_workload([NESTED_APP], tracer_args=["--mem"],
                                   out_name="nested-twins.json")
    info = {f[0]: int(f[1], 16) for f in infos(wl)}
    # the trace writer: cudaMemcpy made cuMemcpyHtoD_v2 (nested), the direct one is written
    assert [e["name"] for e in calls(trace, pid=wl.pid, name="cudaMemcpy")] == ["cudaMemcpy"]
    drv = [e["name"] for e in calls(trace, pid=wl.pid, cat="cuda_driver")]
    assert drv == ["cuMemcpyHtoD"], drv
    assert trace["tptrace"]["nested_driver_calls"] == 1, trace["tptrace"]
    # the memory tracer: cudaMalloc and cudaFree made cuMemAlloc_v2 and cuMemFree_v2 (nested)
    mem = [(n, int(c["ptr"], 16)) for n, c in mem_calls(trace)]
    assert mem == [("cudaMalloc", info["cudaMalloc"]), ("cuMemAlloc_v2", info["cuMemAlloc"]),
                   ("cudaFree", info["cudaMalloc"]), ("cuMemFree_v2", info["cuMemAlloc"])], mem
    m = trace["tptrace_memory"]
    assert (m["nested_driver_calls"], m["calls"]) == (2, 4), m


def test_mem_driver_and_vmm():
    """The driver's calls in the simulated libcuda.so.1: cuMemAlloc_v2/cuMemFree_v2 are segments,
    cuMemCreate counts as reserved on the device of prop->location, cuMemMap/cuMemUnmap are
    segment_map/segment_unmap (PyTorch's expandable segments); cuMemAddressReserve is not a
    memory event."""
    wl, tr, trace, snap = run_driver_workload([VMM_APP], "mem-vmm")
    assert "0 USDT probes, 0 runtime and 8 driver functions" in tr.started, tr.started
    info = {f[0]: int(f[1], 16) for f in infos(wl)}
    p, h, va = info["cuMemAlloc"], info["cuMemCreate"], info["va"]
    calls = mem_calls(trace)
    assert [n for n, _ in calls] == ["cuMemAlloc_v2", "cuMemCreate", "cuMemMap", "cuMemUnmap",
                                     "cuMemRelease", "cuMemFree_v2"], calls
    a = dict(calls)
    assert (a["cuMemAlloc_v2"]["size"], int(a["cuMemAlloc_v2"]["ptr"], 16)) == (MIB, p)
    assert (a["cuMemCreate"]["size"], int(a["cuMemCreate"]["handle"], 16), a["cuMemCreate"]["device"]) == (2 * MIB, h, 1)
    assert (int(a["cuMemMap"]["ptr"], 16), a["cuMemMap"]["size"], int(a["cuMemMap"]["handle"], 16)) == (va, 2 * MIB, h)
    assert (int(a["cuMemUnmap"]["ptr"], 16), a["cuMemUnmap"]["size"]) == (va, 2 * MIB)
    assert int(a["cuMemRelease"]["handle"], 16) == h and int(a["cuMemFree_v2"]["ptr"], 16) == p
    assert counter(trace, "bytes reserved (cuda:1)") == [2 * MIB, 0, 0]
    assert counter(trace, "bytes reserved (cuda:0)") == [MIB, 0, 0]
    check_viz_fields(snap)
    assert [(e["action"], e["addr"], e["size"]) for e in snap["device_traces"][0]] == \
        [("segment_alloc", p, MIB), ("segment_free", p, MIB)]
    assert [(e["action"], e["addr"], e["size"]) for e in snap["device_traces"][1]] == \
        [("segment_map", va, 2 * MIB), ("segment_unmap", va, 2 * MIB)]
    assert snap["segments"] == []


def test_mem_driver_nested_in_runtime_once():
    """The simulated runtime runs cudaMalloc on cuMemAlloc_v2 and cudaFree on cuMemFree_v2 (as
    the real one does): each allocation is recorded once, by its outermost call; the nested
    driver calls are counted, and direct driver calls in the same process still recorded."""
    wl, tr, trace, snap = run_driver_workload([NESTED_APP], "mem-nested")
    info = {f[0]: int(f[1], 16) for f in infos(wl)}
    a, b = info["cudaMalloc"], info["cuMemAlloc"]
    calls = mem_calls(trace)
    assert [(n, int(c["ptr"], 16)) for n, c in calls] == [
        ("cudaMalloc", a), ("cuMemAlloc_v2", b), ("cudaFree", a), ("cuMemFree_v2", b)], calls
    assert [c["size"] for n, c in calls if "Alloc" in n or n == "cudaMalloc"] == [3 * MIB, MIB]
    # the last value is the counters' closing sample at the end of the trace
    assert counter(trace, "bytes reserved (cuda:0)") == [3 * MIB, 4 * MIB, MIB, 0, 0]
    check_viz_fields(snap)
    assert [(e["action"], e["addr"], e["size"]) for e in snap["device_traces"][0]] == [
        ("segment_alloc", a, 3 * MIB), ("segment_alloc", b, MIB),
        ("segment_free", a, 3 * MIB), ("segment_free", b, MIB)]
    assert snap["segments"] == []
    m = trace["tptrace"]["memory"]
    assert "0 USDT probes, 11 runtime and 8 driver functions" in tr.started, tr.started
    assert (m["nested_driver_calls"], m["calls"], m["orphan_returns"]) == (2, 4, 0), m
