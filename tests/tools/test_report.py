#!/usr/bin/env python3
"""`tptrace report` on saved traces (tests/tools/data/report_traces/: traces tptrace made of
the simulated jobs of tests/e2e/test_report.py, gzipped), no root needed. Each number checked
is recomputed here from the trace's raw events, independently of the C analysis: the step
boundaries, GPU time per step, idle time, tiny kernels, pageable bytes and bandwidth, blocking
copies, collective waits, OOMs.

Run from the repo root after `make`. Prints `ok <name>` or `FAIL <name>: reason`; exit 1 if
any failed. To refresh the traces: run tests/e2e/test_report.py (as root), then gzip
.output/tmp/report-<name>.json into the data directory."""
import gzip
import json
import subprocess
import sys
import traceback

TPTRACE = "./tptrace"
DATA = "tests/tools/data/report_traces"
TINY_NS = 10000


def load(name):
    with gzip.open(f"{DATA}/{name}.json.gz", "rt") as f:
        return json.load(f)


def report(*names, args=()):
    p = subprocess.run([TPTRACE, "report", "--json"] + [f"{DATA}/{n}.json.gz" for n in names]
                       + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def ns(trace, ts_us):
    return trace["tptrace"]["base_mono_ns"] + round(ts_us * 1000)


def spans(trace, cat, pid=None):
    """(start_ns, end_ns, event) of the X events of a category"""
    out = []
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == cat and (pid is None or e["pid"] == pid):
            a = ns(trace, e["ts"])
            out.append((a, a + round(e["dur"] * 1000), e))
    return sorted(out, key=lambda x: x[0])


def union(ivals):
    out = []
    for a, b in sorted(ivals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def covered(merged, a, b):
    return sum(max(0, min(y, b) - max(x, a)) for x, y in merged)


def sync_steps(trace, name):
    """steps as the report defines them: from one end of the step-ending call to the next"""
    ends = [b for a, b, e in spans(trace, "cuda_runtime") if e["name"] == name]
    return list(zip(ends, ends[1:]))


def ids(r):
    return [f["id"] for f in r["findings"]]


def one(r, fid):
    f = [x for x in r["findings"] if x["id"] == fid]
    assert len(f) == 1, (fid, ids(r))
    return f[0]


def gpu_busy(trace):
    return union([(a, b) for cat in ("kernel", "gpu_memcpy", "gpu_memset")
                  for a, b, _ in spans(trace, cat)])


def check_steps(r, want):
    got = [(s["start_ns"], s["start_ns"] + s["wall_ns"]) for s in r["steps"]["per_rank"][0]["steps"]]
    assert got == want, (got[:3], want[:3])


def case_healthy():
    t, r = load("healthy"), report("healthy")
    assert ids(r) == [], ids(r)
    want = sync_steps(t, "cudaEventSynchronize")
    check_steps(r, want)
    kernels = [(a, b) for a, b, _ in spans(t, "kernel")]
    copies = [(a, b) for a, b, _ in spans(t, "gpu_memcpy")]
    busy = gpu_busy(t)
    for s, (a, b) in zip(r["steps"]["per_rank"][0]["steps"], want):
        assert s["compute_ns"] == sum(max(0, min(y, b) - max(x, a)) for x, y in kernels), s
        assert s["copy_ns"] == sum(max(0, min(y, b) - max(x, a)) for x, y in copies), s
        assert s["gpu_busy_ns"] == covered(busy, a, b), s
        assert s["launches"] == sum(1 for x, _, e in spans(t, "cuda_runtime")
                                    if e["name"] == "cudaLaunchKernel" and a <= x < b), s
    k = r["kernels"]["top"][0]
    durs = sorted(b - a for a, b in kernels)
    assert k["count"] == len(durs) and k["total_ns"] == sum(durs), k
    assert k["p50_ns"] == durs[len(durs) // 2 - (len(durs) % 2 == 0)] or \
        k["p50_ns"] == durs[len(durs) // 2], (k, durs)


def case_sync():
    t, r = load("sync"), report("sync")
    assert sorted(ids(r)) == ["blocking_dtoh", "gpu_idle", "host_sync"], ids(r)
    want = sync_steps(t, "cudaStreamSynchronize")
    check_steps(r, want)
    win = want[-1][1] - want[0][0]
    idle = one(r, "gpu_idle")["numbers"]
    assert idle["window_ns"] == win, idle
    assert idle["idle_ns"] == win - covered(gpu_busy(t), want[0][0], want[-1][1]), idle
    assert idle["idle_ns"] == idle["idle_after_sync_ns"] + idle["idle_launch_bound_ns"] + \
        idle["idle_waiting_data_ns"] + idle["idle_other_ns"], idle
    hs = one(r, "host_sync")["numbers"]
    syncs_in = [e for a, _, e in spans(t, "cuda_runtime")
                if e["name"] == "cudaStreamSynchronize" and want[0][0] <= a < want[-1][1]]
    assert hs["syncs"] == len(syncs_in) == len(want), hs
    d = one(r, "blocking_dtoh")["numbers"]
    dtoh = [e for a, _, e in spans(t, "cuda_runtime")
            if e["name"] == "cudaMemcpyAsync" and e["args"]["kind"] == "DtoH"
            and want[0][0] <= a < want[-1][1]]
    assert d["copies"] == len(dtoh) and d["bytes"] == sum(e["args"]["bytes"] for e in dtoh), d


def case_sync_slow_pinned_copy():
    """a busy host: one step's pinned cudaMemcpyAsync(HtoD) returns only after its GPU copy
    ended and the step's first kernel is launched 100 us late. An async copy from pinned memory waits for nothing,
    so the GPU's wait for that kernel is launch-bound, not one more gap after a host sync"""
    import os
    import tempfile
    t, base = load("sync"), report("sync")
    ev = t["traceEvents"]
    by_corr = {}
    for e in ev:
        c = e.get("args", {}).get("correlation") if e.get("ph") == "X" else None
        if c is not None:
            by_corr.setdefault(c, {})[e["cat"]] = e
    copies = sorted((e for e in ev if e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]),
                    key=lambda e: e["ts"])
    gpu_copy = copies[len(copies) // 2]
    call = by_corr[gpu_copy["args"]["correlation"]]["cuda_runtime"]
    kernels = sorted((e for e in ev if e.get("cat") == "kernel" and e["ts"] > gpu_copy["ts"]),
                     key=lambda e: e["ts"])
    k1 = kernels[0]
    launch = by_corr[k1["args"]["correlation"]]["cuda_runtime"]
    # preempted: it returns 20 us after its GPU copy ended
    call["dur"] = gpu_copy["ts"] + gpu_copy["dur"] + 20 - call["ts"]
    delta = 100.0
    launch["ts"] = max(call["ts"] + call["dur"], gpu_copy["ts"]) + 1
    k1["ts"] = max(k1["ts"] + delta, launch["ts"] + 5)
    k1["dur"] = kernels[1]["ts"] - 7 - k1["ts"]
    gap = k1["ts"] - (gpu_copy["ts"] + gpu_copy["dur"])
    fd, path = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(t, f)
        p = subprocess.run([TPTRACE, "report", "--json", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        r = json.loads(p.stdout)
    finally:
        os.unlink(path)
    hs0, hs = one(base, "host_sync")["numbers"], one(r, "host_sync")["numbers"]
    assert hs["gaps_after_sync"] == hs0["gaps_after_sync"], (hs0, hs)
    assert hs["host_blocked_ns"] == hs0["host_blocked_ns"], (hs0, hs)
    i0, i = one(base, "gpu_idle")["numbers"], one(r, "gpu_idle")["numbers"]
    assert i["idle_after_sync_ns"] == i0["idle_after_sync_ns"], (i0, i)
    assert i["idle_launch_bound_ns"] >= i0["idle_launch_bound_ns"] + round(gap * 1000) - 1, \
        (i0, i, gap)


def case_tiny():
    t, r = load("tiny"), report("tiny")
    n = one(r, "tiny_kernels")["numbers"]
    durs = [b - a for a, b, _ in spans(t, "kernel")]
    tiny = [d for d in durs if d < TINY_NS]
    assert n["kernels"] == len(durs) and n["tiny_kernels"] == len(tiny), n
    assert n["tiny_mean_ns"] == sum(tiny) / len(tiny), n
    assert abs(n["tiny_time_frac"] - sum(tiny) / sum(durs)) < 1e-12, n


def case_pageable():
    t, r = load("pageable"), report("pageable")
    assert ids(r) == ["pageable_copies"], ids(r)
    n = one(r, "pageable_copies")["numbers"]
    pg = [(b - a, e["args"]["bytes"]) for a, b, e in spans(t, "gpu_memcpy") if "Pageable" in e["name"]]
    assert n["pageable_copies"] == len(pg) and n["pageable_bytes"] == sum(x for _, x in pg), n
    assert n["pageable_ns"] == sum(d for d, _ in pg), n
    assert abs(n["pageable_gbps"] - sum(x for _, x in pg) / sum(d for d, _ in pg)) < 1e-9, n


def case_without_gpu():
    t, r = load("sync-nogpu"), report("sync-nogpu")
    assert ids(r) == ["blocking_dtoh"], ids(r)
    check_steps(r, sync_steps(t, "cudaStreamSynchronize"))
    whats = {c["what"] for c in r["cannot_judge"]}
    assert "GPU idle time and its causes (launch-bound, host syncs, data)" in whats, whats
    assert all(s["gpu_idle_ns"] is None for s in r["steps"]["per_rank"][0]["steps"])


def case_straggler():
    names = ["straggler-0", "straggler-1", "straggler-2"]
    ts, r = [load(n) for n in names], report(*names)
    nccl = [[b - a for a, b, e in spans(t, "kernel") if e["name"].startswith("nccl")] for t in ts]
    n = min(len(x) for x in nccl)
    wait = [sum(d[i] - min(x[i] for x in nccl) for i in range(n)) for d in nccl]
    slow = wait.index(min(wait))
    s = one(r, "straggler_rank")["numbers"]
    ranks = [t["tptrace"]["targets"][0]["rank"] for t in ts]
    assert s["rank"] == ranks[slow] == 2 and s["collective_wait_ns"] == wait[slow], (s, wait)
    others = sorted(w for i, w in enumerate(wait) if i != slow)
    assert s["others_collective_wait_ns_median"] == others[len(others) // 2], (s, others)
    assert {k["rank"]: k["collective_wait_ns"] for k in r["ranks"]} == dict(zip(ranks, wait))


def case_oom():
    t, r = load("oom"), report("oom")
    ooms = [e for e in t["traceEvents"] if e.get("cat") == "cuda_memory" and e["name"] == "OOM"]
    n = one(r, "oom")["numbers"]
    assert n["ooms"] == len(ooms) == 2 and n["first_request_bytes"] == ooms[0]["args"]["size"], n


def case_step_func():
    t, r = load("pytrain"), report("pytrain", args=["--step", "train_step"])
    sl = [(a, b) for a, b, e in spans(t, "python_function") if e["name"].endswith(": train_step")]
    assert r["steps"]["method"] == "python:train_step"
    check_steps(r, sl)


def case_summary_fits():
    for n in ("sync", "tiny", "sync-nogpu", "oom"):
        p = subprocess.run([TPTRACE, "report", f"{DATA}/{n}.json.gz"], stdout=subprocess.PIPE,
                           text=True, timeout=60)
        assert p.returncode == 0
        long = [l for l in p.stdout.splitlines() if len(l) > 100]
        assert not long, (n, long)


def case_malformed_event_one_line():
    """an event that is not JSON (a missing comma, a bad escape, a number JSON does not have,
    a trailing comma, a bare word) in an otherwise good trace: exit 1, one line naming the
    event's byte, nothing on stdout; never read as an event with a field missing"""
    import os
    import tempfile
    with gzip.open(f"{DATA}/healthy.json.gz", "rt") as f:
        text = f.read()
    at = text.index('"traceEvents"')
    at = text.index("[", at) + 1
    bad = {
        "missing comma": '{"ph":"X","name":"k" "ts":1,"dur":2,"pid":1,"tid":1},',
        "bad escape": '{"ph":"X","name":"k\\x","ts":1,"dur":2,"pid":1,"tid":1},',
        "plus sign": '{"ph":"X","name":"k","ts":+1,"dur":2,"pid":1,"tid":1},',
        "trailing comma": '{"ph":"X","name":"k","ts":1,"dur":2,"pid":1,"tid":1,},',
        "bare word": '{"ph":"X","name":"k","ts":one,"dur":2,"pid":1,"tid":1},',
        "args missing comma": '{"ph":"X","name":"k","ts":1,"args":{"stream":7 "rc":0}},',
    }
    with tempfile.TemporaryDirectory() as d:
        for what, ev in bad.items():
            p = os.path.join(d, "bad.json")
            with open(p, "w") as f:
                f.write(text[:at] + ev + text[at:])
            r = subprocess.run([TPTRACE, "report", p], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=60)
            want = f"tptrace report: {p}: malformed event at byte {at}\n"
            assert (r.returncode, r.stdout, r.stderr) == (1, "", want), (what, r.returncode,
                                                                         r.stderr[:300])


def main():
    failed = 0
    for name, fn in sorted((k, v) for k, v in globals().items() if k.startswith("case_")):
        try:
            fn()
            print(f"ok {name[5:]}")
        except Exception as e:
            failed += 1
            print(f"FAIL {name[5:]}: {e!r}\n{traceback.format_exc(limit=2)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
