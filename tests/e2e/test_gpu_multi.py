"""Tier 2: one `tptrace -p A -p B ... --gpu` over several processes, and one process over
several devices and contexts, on the simulated stack. Each process has its own CUPTI: its own
correlation counter (so the processes' ids collide: every sim process counts from the same
start), its own thread ids, its own enable time. What is checked, against each workload's own
account (TPSIM_VERBOSE lines, its documented call counts):
  - every launch->kernel arrow has both ends in one process, ids unique in the trace;
  - each process's GPU work is on its own tracks only (labelled "pid P comm, context C", named
    apart), with exactly the kernels its sim ran under those correlations;
  - the join's counts per process are its own calls (exact), and sum to the total;
  - `tptrace report` gives each process exactly the GPU time of its own tracks;
  - a process using 2 devices and 2 contexts on device 1: a track per (device, context), the
    copies and stream waits of each context on its own track;
  - a process whose CUPTI was enabled later (it ran before its agent came) and one that ended
    earlier: calls before the enable are BEFORE_ENABLE, never joined to another's records."""
import errno
import json
import os
import re
import subprocess
import time
from gpulib import need_ptrace, tpsim_items
from lib import (TPTRACE, WL, Tracer, Workload, check_valid_trace, load_trace, need_root,
                 tmp_path)
import test_pftrace

SIM_TRAIN = os.path.join(WL, "sim_train")
GPU_MULTI = os.path.join(WL, "gpu_multi")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
LABEL = re.compile(r"pid (\d+) (.*), context (\d+)$")


def fresh(name):
    path = tmp_path(name)
    if os.path.exists(path):
        os.unlink(path)
    return path


def run_jobs(argvs, out_name, env=None, tracer_env=None):
    """Start every workload (READY), one tptrace -p each --gpu, GO all, wait DONE all; the
    tracer ends when the last one exits. Returns (trace, workloads)."""
    out = fresh(out_name)
    wls = []
    try:
        for argv in argvs:
            wls.append(Workload(argv, env=env))
        args = []
        for wl in wls:
            args += ["-p", str(wl.pid)]
        tr = Tracer(args + ["-o", out, "--gpu"], env=tracer_env)
        for wl in wls:
            wl.go()
        for wl in wls:
            wl.wait_done(120)
        for wl in wls:
            wl.finish()
        rc = tr.wait(60)
        assert rc == 0, f"tptrace rc={rc}: {tr.err.text()}"
    finally:
        for wl in wls:
            wl.kill()
    return load_trace(out), wls


def gpu_tracks(trace):
    """{trace pid: {"host": pid, "comm", "context", "name"}} from the GPU tracks' metadata."""
    tracks = {}
    for e in trace["traceEvents"]:
        if e["ph"] != "M":
            continue
        if e["name"] == "process_labels":
            m = LABEL.match(e["args"]["labels"])
            if m:
                t = tracks.setdefault(e["pid"], {})
                t.update(host=int(m.group(1)), comm=m.group(2), context=int(m.group(3)))
        elif e["name"] == "process_name" and e["args"]["name"].startswith("GPU "):
            tracks.setdefault(e["pid"], {})["name"] = e["args"]["name"]
    for pid, t in tracks.items():
        assert "host" in t and "name" in t, (pid, t)
    names = [t["name"] for t in tracks.values()]
    assert len(set(names)) == len(names), f"GPU tracks named alike: {names}"
    return tracks


def gpu_work(trace, tracks, host):
    """Host process host's GPU events (on its tracks)."""
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_CATS
            and tracks[e["pid"]]["host"] == host]


def host_calls(trace, pid, name=None):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] == pid
            and e.get("cat") in ("cuda_runtime", "cuda_driver")
            and (name is None or e["name"] == name)]


def target_meta(trace, pid):
    (t,) = [t for t in trace["tptrace"]["targets"] if t["pid"] == pid]
    return t


def check_processes(trace, wls, launches_want, joined_want, flows_want):
    """What every trace of these processes must show; returns the tracks."""
    check_valid_trace(trace)
    tracks = gpu_tracks(trace)
    pids = {wl.pid for wl in wls}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in GPU_CATS:
            assert e["pid"] in tracks, f"GPU event off the GPU tracks: {e}"
            t = tracks[e["pid"]]
            assert t["host"] in pids and e["args"]["context"] == t["context"], (e, t)
    # several processes: each track named with its process
    for pid, t in tracks.items():
        assert len(wls) == 1 or f"pid {t['host']}" in t["name"], t
    # arrows: each id once, its two ends in one process
    starts = {}
    ends = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "s":
            assert e["id"] not in starts, f"arrow id {e['id']} used twice"
            starts[e["id"]] = e
        elif e.get("ph") == "f":
            assert e["id"] not in ends, f"arrow id {e['id']} ends twice"
            ends[e["id"]] = e
    assert set(starts) == set(ends)
    for i, s in starts.items():
        f = ends[i]
        assert tracks[f["pid"]]["host"] == s["pid"], \
            f"arrow {i} from pid {s['pid']} ends on {tracks[f['pid']]}"
    total = {"calls": 0, "joined": 0, "flows": 0}
    for wl in wls:
        items = tpsim_items(wl.err.text())
        mine = gpu_work(trace, tracks, wl.pid)
        kernels = {e["args"]["correlation"]: e for e in mine if e["cat"] == "kernel"}
        sim_kernels = {c: i for c, i in items.items() if i["kind"] == "kernel"}
        # exactly the kernels this process's sim ran, under its own correlation ids
        assert set(kernels) == set(sim_kernels), (wl.pid, sorted(kernels), sorted(sim_kernels))
        for c, k in kernels.items():
            assert k["name"] == sim_kernels[c]["name"], (k, sim_kernels[c])
            assert k["args"]["device"] == sim_kernels[c]["dev"], (k, sim_kernels[c])
        launches = host_calls(trace, wl.pid, "cudaLaunchKernel")
        assert len(launches) == launches_want[wl.pid], (wl.pid, len(launches))
        my_arrows = {i: s for i, s in starts.items() if s["pid"] == wl.pid}
        arrow_at = {(s["tid"], s["ts"]): i for i, s in my_arrows.items()}
        for l in launches:
            assert "cupti" not in l["args"], l
            k = kernels.get(l["args"]["correlation"])
            assert k and k["name"] == l["args"]["kernel"], (l, k)
            # its arrow, from the launch to that kernel
            i = arrow_at.get((l["tid"], l["ts"]))
            assert i is not None, f"launch without its arrow: {l}"
            assert (ends[i]["pid"], ends[i]["tid"], ends[i]["ts"]) == \
                (k["pid"], k["tid"], k["ts"]), (l, k, ends[i])
        # every arrow of this process ends on its own work of that correlation
        for i, s in my_arrows.items():
            f = ends[i]
            assert (int(i) & 0xffffffff) in {e["args"]["correlation"] for e in mine
                                             if e["pid"] == f["pid"] and e["tid"] == f["tid"]}
        j = target_meta(trace, wl.pid)["gpu"]["join"]
        joined = [e for e in host_calls(trace, wl.pid) if "cupti" not in e["args"]
                  and e["args"]["correlation"] < (1 << 40)]
        assert j["joined"] == joined_want[wl.pid] == len(joined), (wl.pid, j, len(joined))
        assert j["calls"] == j["joined"] + sum(j["unjoined"].values()), j
        assert j["flows"] == len(my_arrows) == flows_want[wl.pid], (wl.pid, j, len(my_arrows))
        for k in total:
            total[k] += j[k]
    jt = trace["tptrace"]["gpu_join"]
    assert {k: jt[k] for k in total} == total, (jt, total)
    return tracks


def union_ns(events):
    iv = sorted((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in events)
    busy, end = 0, None
    for a, b in iv:
        if end is None or a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    return busy


def check_report(trace_path, trace, tracks, wls):
    """tptrace report: each process's GPU busy time is its own tracks' (per device)."""
    p = subprocess.run([TPTRACE, "report", trace_path, "--json"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    util = {(u["pid"], u["device"]): u for u in r["timeline"]["utilization"]}
    for wl in wls:
        mine = [e for e in gpu_work(trace, tracks, wl.pid) if e["cat"] != "cuda_sync"]
        for dev in {e["args"]["device"] for e in mine}:
            on = [e for e in mine if e["args"]["device"] == dev]
            u = util.get((wl.pid, dev))
            assert u, (wl.pid, dev, sorted(util))
            # the trace's µs with 3 decimals: 1 ns per item of rounding
            assert abs(u["busy_ns"] - union_ns(on)) <= len(on), (wl.pid, dev, u["busy_ns"],
                                                                  union_ns(on))
    assert {pid for pid, _ in util} == {wl.pid for wl in wls}, sorted(util)


def sim_train_jobs(n):
    argvs = [[SIM_TRAIN, "--steps", str(i + 1), "--kernel-us", "100"] for i in range(n)]
    return argvs


def sim_train_expect(wls):
    """sim_train's own counts per S steps: cudaLaunchKernel 4S; the calls that take a CUPTI
    record: 4S launches + 2S cudaMemcpyAsync + S cudaEventRecord + S cudaStreamWaitEvent;
    arrows from the launches and copies, 6S."""
    steps = {wl.pid: int(wl.argv[2]) for wl in wls}
    # arrows: from the launches and the copies
    return ({p: 4 * s for p, s in steps.items()}, {p: 8 * s for p, s in steps.items()},
            {p: 6 * s for p, s in steps.items()})


def test_gpu_multi_two_processes():
    """Two sim_train processes under one --gpu (their correlation ids collide), with the
    .pftrace of the same run: each process's work on its own, named tracks."""
    need_root()
    need_ptrace()
    pf = fresh("gpu-multi-2.pftrace")
    trace, wls = run_jobs(sim_train_jobs(2), "gpu-multi-2.json", env={"TPSIM_VERBOSE": "1"},
                          tracer_env={"TPTRACE_TRACE_TEE": pf})
    launches, joined, flows = sim_train_expect(wls)
    tracks = check_processes(trace, wls, launches, joined, flows)
    # both processes ran on device 0: two tracks for it, one per process
    assert sorted(t["host"] for t in tracks.values()) == sorted(wl.pid for wl in wls), tracks
    # the correlation ids really collide: the keying is what keeps them apart
    ids = [{e["args"]["correlation"] for e in gpu_work(trace, tracks, wl.pid)} for wl in wls]
    assert ids[0] & ids[1], "the two processes' correlation ids never collided"
    check_report(tmp_path("gpu-multi-2.json"), trace, tracks, wls)
    # the .pftrace: the same events on the same tracks, GPU tracks named with their process
    test_pftrace.compare(trace, pf)
    names = set()
    for p in test_pftrace.decode(pf):
        for td in p.get("track_descriptor", []):
            if "name" in td and str(td["name"][0]).startswith("GPU "):
                names.add(td["name"][0])
    assert names == {t["name"] for t in tracks.values()}, (names, tracks)


def test_gpu_multi_eight_processes():
    """Eight processes, 1..8 steps each: every count is each process's own."""
    need_root()
    need_ptrace()
    trace, wls = run_jobs(sim_train_jobs(8), "gpu-multi-8.json", env={"TPSIM_VERBOSE": "1"})
    launches, joined, flows = sim_train_expect(wls)
    tracks = check_processes(trace, wls, launches, joined, flows)
    assert len({t["host"] for t in tracks.values()}) == 8, tracks
    check_report(tmp_path("gpu-multi-8.json"), trace, tracks, wls)


def test_gpu_multi_devices_and_contexts():
    """One process on 2 devices: device 0's primary context, device 1's primary context and a
    context of its own on device 1 (cuCtxCreate), with copies and stream waits on both of
    device 1's: one track per (device, context), each item on its own."""
    need_root()
    need_ptrace()
    steps = 3
    trace, (wl,) = run_jobs([[GPU_MULTI, "--contexts", "--steps", str(steps)]],
                            "gpu-multi-ctx.json",
                            env={"TPSIM_VERBOSE": "1", "TPSIM_DEVICES": "2"})
    m = re.search(r"# contexts device1_primary=(\d+) device1_own=(\d+) streams s0=(\d+) "
                  r"p1=(\d+) p1w=(\d+) c1=(\d+) c1w=(\d+)", wl.out.text())
    assert m, wl.out.text()
    prim1, own, s0, p1, p1w, c1, c1w = map(int, m.groups())
    assert own != prim1
    tracks = check_processes(trace, [wl], {wl.pid: 4 * steps},
                             # launches, copies, event records, stream waits
                             {wl.pid: 4 * steps + 2 * steps + 2 * steps + 2 * steps},
                             {wl.pid: 4 * steps + 2 * steps})
    by_ctx = {(e["args"]["device"], t["context"]): pid for pid, t in tracks.items()
              for e in gpu_work(trace, tracks, wl.pid) if e["pid"] == pid}
    ctx0 = {c for (d, c) in by_ctx if d == 0}
    assert set(by_ctx) == {(0, min(ctx0)), (1, prim1), (1, own)}, by_ctx
    assert len(tracks) == 3 and all(t["host"] == wl.pid for t in tracks.values()), tracks
    names = sorted(t["name"] for t in tracks.values())
    assert names == ["GPU 0", "GPU 1", f"GPU 1 (context {own})"], names
    items = tpsim_items(wl.err.text())
    ctx_re = re.compile(r"tpsim: .* corr=(\d+) .* ctx=(\d+)$")
    sim_ctx = {int(c): int(x) for c, x in (ctx_re.match(l).groups() for l in
                                            wl.err.text().splitlines() if ctx_re.match(l))}
    want = {  # (cat, name) -> (device, context, stream), steps of each
        ("kernel", "dev0_k"): (0, min(ctx0), s0, 2 * steps),
        ("kernel", "dev1_k"): (1, prim1, p1, steps),
        ("kernel", "ctx_k"): (1, own, c1, steps),
        ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)"): (1, prim1, p1, steps),
        ("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)"): (1, own, c1, steps),
        ("cuda_sync", "Stream Wait Event"): None,
    }
    seen = {}
    for e in gpu_work(trace, tracks, wl.pid):
        key = (e["cat"], e["name"])
        assert key in want, e
        seen[key] = seen.get(key, 0) + 1
        t = tracks[e["pid"]]
        assert e["args"]["context"] == t["context"], (e, t)
        # the sim's own record of the item: its context
        assert sim_ctx[e["args"]["correlation"]] == t["context"], (e, t)
        if want[key]:
            dev, ctx, stream, _ = want[key]
            assert (e["args"]["device"], t["context"], e["tid"]) == (dev, ctx, stream), (e, t)
        else:
            # each context's wait on its own waiting stream, on that context's track
            assert (t["context"], e["tid"]) in ((prim1, p1w), (own, c1w)), (e, t)
            assert items[e["args"]["correlation"]]["kind"] == "wait_event"
    assert seen == {k: (v[3] if v else 2 * steps) for k, v in want.items()}, seen
    waits = [e for e in gpu_work(trace, tracks, wl.pid) if e["cat"] == "cuda_sync"]
    assert sorted(tracks[e["pid"]]["context"] for e in waits) == \
        sorted([prim1] * steps + [own] * steps), waits
    # launches joined, each arrow onto its kernel's (device, context) track
    launches = host_calls(trace, wl.pid, "cudaLaunchKernel")
    assert len(launches) == 4 * steps
    ends = {e["id"]: e for e in trace["traceEvents"] if e.get("ph") == "f"}
    kernels = {e["args"]["correlation"]: e for e in gpu_work(trace, tracks, wl.pid)
               if e["cat"] == "kernel"}
    for l in launches:
        assert "cupti" not in l["args"], l
        k = kernels[l["args"]["correlation"]]
        f = ends[l["args"]["correlation"]]
        assert (f["pid"], f["tid"]) == (k["pid"], k["tid"]), (l, k, f)
    j = target_meta(trace, wl.pid)["gpu"]["join"]
    assert j["unjoined"] == {"before_enable": 0, "after_disable": 0, "no_record": 0, "ambiguous": 0}, j


def test_gpu_multi_enabled_late_and_ended_early():
    """A waits for GO; B launches freely from before tptrace attaches. tptrace injects A's
    agent, then B's: B's calls until its own enable have no CUPTI record (BEFORE_ENABLE),
    whatever A's records say, and every one after it is joined to B's own. A ends first (its
    agent's records drained at its exit); B goes on past that, then stops."""
    need_root()
    need_ptrace()
    out = fresh("gpu-multi-late.json")
    env = {"TPSIM_VERBOSE": "1"}
    gate = fresh("gpu-multi-late.gate")
    os.mkfifo(gate)
    a = Workload([GPU_MULTI, "--steps", "20"], env=env)
    b = Workload([GPU_MULTI, "--free-run"], env=env)
    try:
        # tptrace holds between its probes and the agents (TPTRACE_TEST_GPU_GATE) until B
        # has launched under the probes: two of B's kernels started after tptrace reached
        # the gate (B syncs each one, so the second was launched after it)
        tr = Tracer(["-p", str(a.pid), "-p", str(b.pid), "-o", out, "--gpu"],
                    ready=False, env={"TPTRACE_TEST_GPU_GATE": gate})
        fd = None
        while fd is None:
            try:
                fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO or tr.p.poll() is not None:
                    raise AssertionError(f"tptrace never reached the gate: {tr.err.text()}")
                time.sleep(0.01)
        at_gate = time.monotonic_ns()
        late = lambda _l: sum(1 for i in tpsim_items(b.err.text()).values()
                              if i["kind"] == "kernel" and i["start"] > at_gate) >= 2
        assert b.err.wait_for(late, 60), b.err.text()[-2000:]
        os.write(fd, b"go\n")
        os.close(fd)
        # both agents enabled: A waits for GO until then, so all its calls have records
        assert tr.err.wait_for(lambda l: l.startswith("tptrace: tracing"), 120), tr.err.text()
        a.go()
        a.wait_done(60)
        a.finish()
        # A is gone for tptrace before B stops: B's last calls come after A's agent left
        assert tr.err.wait_for(lambda l: f"pid {a.pid} " in l and "exited" in l, 60), \
            tr.err.text()
        b.p.stdin.write("STOP\n")
        b.p.stdin.flush()
        b.wait_done(60)
        b.finish()
        rc = tr.wait(60)
        assert rc == 0, tr.err.text()
    finally:
        a.kill()
        b.kill()
    trace = load_trace(out)
    check_valid_trace(trace)
    tracks = gpu_tracks(trace)
    nb = int(re.search(r"# launches (\d+)", b.out.text()).group(1))
    la = host_calls(trace, a.pid, "cudaLaunchKernel")
    lb = sorted(host_calls(trace, b.pid, "cudaLaunchKernel"), key=lambda e: e["ts"])
    assert len(la) == 40 and all("cupti" not in l["args"] for l in la), la[:3]
    # B's calls traced: from tptrace's probes on (it launched before them too)
    assert 0 < len(lb) <= nb, (len(lb), nb)
    status = ["joined" if "cupti" not in l["args"] else l["args"]["cupti"] for l in lb]
    first = status.index("joined")
    assert first > 0, "B's launches under the gate are not in the trace"
    assert set(status[:first]) == {"before CUPTI was enabled"}, status[:first + 3]
    assert set(status[first:]) == {"joined"}, [s for s in status[first:] if s != "joined"][:5]
    # B's joined launches: exactly its own kernels (its sim's), on its own track
    sim_b = {c: i for c, i in tpsim_items(b.err.text()).items() if i["kind"] == "kernel"}
    kb = {e["args"]["correlation"]: e for e in gpu_work(trace, tracks, b.pid)
          if e["cat"] == "kernel"}
    for l in lb[first:]:
        c = l["args"]["correlation"]
        assert c in sim_b and c in kb and kb[c]["name"] == "free_k", (l, kb.get(c))
    # B's calls after A's exit are there and joined (the last five at least)
    assert lb[-1]["ts"] > max(l["ts"] for l in la)
    ja = target_meta(trace, a.pid)["gpu"]["join"]
    jb = target_meta(trace, b.pid)["gpu"]["join"]
    assert ja["unjoined"]["before_enable"] == 0 and ja["joined"] == 40, ja
    assert jb["unjoined"] == {"before_enable": first, "after_disable": 0, "no_record": 0, "ambiguous": 0}, jb
    assert jb["joined"] == len(lb) - first, (jb, len(lb), first)
    # nothing missing: the summary has no problem line (calls before enable are none)
    assert "--gpu:" not in tr.err.text(), tr.err.text()
    # no arrow crosses: B's kernels on B's track only, A's on A's
    ends = {e["id"]: e for e in trace["traceEvents"] if e.get("ph") == "f"}
    for s in (e for e in trace["traceEvents"] if e.get("ph") == "s"):
        assert tracks[ends[s["id"]]["pid"]]["host"] == s["pid"], s
