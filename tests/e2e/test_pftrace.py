"""Tier 2: `-o FILE.pftrace` (Perfetto's protobuf format, user/trace/trace_pftrace.c). One tptrace run
writes both traces of the same events: the JSON through -o, the .pftrace through
TPTRACE_TRACE_TEE (a test-only knob of the trace writer: the same calls fanned out to a second
output; two runs could not be compared event by event). The .pftrace is decoded with Perfetto's
own published schema (PyPI's `perfetto` package in the test venv: perfetto_trace_pb2, generated
from upstream's perfetto_trace.proto, not our proto/ subset; tests/e2e/pfdecode.py) and read
the way the trace processor reads it, checking what it relies on:
  - each sequence starts with SEQ_INCREMENTAL_STATE_CLEARED (its defaults, clock 64 incremental
    and tied to MONOTONIC) and every later packet on it sets SEQ_NEEDS_INCREMENTAL_STATE;
  - timestamps are deltas on clock 64 or absolute with timestamp_clock_id MONOTONIC, only when
    earlier than the sequence's clock;
  - every interned id is defined on its own sequence, once, before use;
  - every track is declared before an event uses it;
  - with the events sorted by time (the trace processor's sorter: equal times keep file
    order), BEGIN/END balance on every track, each END closing the innermost open slice;
  - every flow has both ends; no field Perfetto does not know.
Then the events are rebuilt into Chrome-JSON-like ones (slices from BEGIN/END pairs, args of
both merged as the trace processor merges them, an END's value winning; tracks back to (pid,
tid), GPU streams by name) and every event of the JSON must be there with the same name,
category, track, timestamp, duration and args, and nothing else: GPU jobs, the memory tracer,
Python frames (--py-stacks, opened by slice_begin) and unfinished calls. The mapping: a JSON
slice of no duration ("X", dur 0) is an INSTANT in the .pftrace (the trace processor makes both
a slice of dur 0), so both sides compare it as an instant on its thread; a hex value ("0x...")
is the same text, interned. Calls with a return are written BEGIN at entry (with what the entry
says: arguments, correlation) and END at return (the rest: rc, out values, the join's results,
"unfinished"): checked on the slices' BEGIN and END args."""
import gzip
import json
import os
import subprocess
from gpulib import need_ptrace
from lib import (E2E_BIN, ROOT, WL, Tracer, Workload, load_trace, need_root, run_tptrace,
                 tmp_path, trace_workload, venv_python)

PFDECODE = os.path.join(ROOT, "tests", "e2e", "pfdecode.py")
CLOCK_MONO, CLOCK_SEQ = 3, 64


def one_line(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"want one error line, got {lines!r}"
    return lines[0]


def decode(path):
    """The .pftrace's packets through Perfetto's own schema: dicts of field -> [values]."""
    py = venv_python()
    p = subprocess.run([py, PFDECODE, path], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def one(d, k, default=None):
    return d[k][0] if k in d else default


def rebuild(packets, json_trace):
    """Chrome-JSON-like events from the packets, keyed as norm_json() keys the JSON's."""
    assert packets, "empty trace"
    first = packets[0]
    assert one(first, "sequence_flags") == 3 and one(first, "first_packet_on_sequence")
    assert one(first, "trusted_packet_sequence_id") == 1
    clocks = {one(c, "clock_id"): one(c, "timestamp")
              for c in one(first, "clock_snapshot")["clocks"]}
    assert set(clocks) == {1, 3, 6}, clocks       # REALTIME, MONOTONIC, BOOTTIME
    assert one(one(first, "trace_packet_defaults"), "timestamp_clock_id") == CLOCK_MONO
    # GPU tracks carry names only: back to the JSON's (device, stream) through its metadata
    gpu_pid, stream_tid = {}, {}
    for e in json_trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"].startswith("GPU "):
            gpu_pid[e["args"]["name"]] = e["pid"]
    for e in json_trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] in gpu_pid.values():
            stream_tid[(e["pid"], e["args"]["name"])] = e["tid"]
    seqs = {}           # id -> {"tables": {...}, "track": default uuid, "clock": last value}
    tracks, timed = {}, []
    thread_names = {}
    for i, p in enumerate(packets):
        assert "_unknown" not in json.dumps(p), f"fields Perfetto does not know: {p}"
        sid = one(p, "trusted_packet_sequence_id")
        assert sid, p
        flags = one(p, "sequence_flags", 0)
        if flags & 1:
            assert sid not in seqs, f"sequence {sid} cleared twice"
            seqs[sid] = {"tables": {k: {} for k in ("event_names", "event_categories",
                                                    "debug_annotation_names",
                                                    "debug_annotation_string_values")}}
            if sid != 1:
                defs = one(p, "trace_packet_defaults")
                assert one(defs, "timestamp_clock_id") == CLOCK_SEQ, p
                seqs[sid]["track"] = one(one(defs, "track_event_defaults"), "track_uuid")
                clk = {one(c, "clock_id"): c for c in one(p, "clock_snapshot")["clocks"]}
                assert one(clk[CLOCK_SEQ], "is_incremental") is True, p
                assert one(clk[CLOCK_SEQ], "timestamp") == one(clk[CLOCK_MONO], "timestamp")
                seqs[sid]["clock"] = one(clk[CLOCK_SEQ], "timestamp")
        seq = seqs.get(sid)
        assert seq is not None, f"packet on sequence {sid} before it was cleared: {p}"
        idata = one(p, "interned_data")
        if idata:
            assert flags & 2, "interned data on a packet that does not need the state"
            for field, tab in seq["tables"].items():
                for ent in idata.get(field, []):
                    iid = one(ent, "iid")
                    assert iid not in tab, f"iid {iid} of {field} defined twice on seq {sid}"
                    tab[iid] = one(ent, "str" if field.endswith("values") else "name")
        td = one(p, "track_descriptor")
        if td:
            uuid = one(td, "uuid")
            if "thread" in td:
                th = one(td, "thread")
                tracks[uuid] = ("thread", one(th, "pid"), one(th, "tid"))
                if "thread_name" in th:
                    thread_names[(one(th, "pid"), one(th, "tid"))] = one(th, "thread_name")
            elif "process" in td:
                tracks[uuid] = ("process", one(one(td, "process"), "pid"), 0)
            elif "counter" in td:
                parent = tracks[one(td, "parent_uuid")]
                tracks[uuid] = ("counter", parent[1], one(td, "name"))
            elif "parent_uuid" in td:       # a GPU stream, under its device
                dev = tracks[one(td, "parent_uuid")][1]
                tracks[uuid] = ("thread", dev, stream_tid[(dev, one(td, "name"))])
            else:                           # a GPU
                tracks[uuid] = ("process", gpu_pid[one(td, "name")], 0)
            continue
        te = one(p, "track_event")
        if not te:
            continue
        assert sid != 1 and flags == 2, p
        if "timestamp_clock_id" in p:
            assert one(p, "timestamp_clock_id") == CLOCK_MONO, p
            ts = one(p, "timestamp")
            assert ts < seq["clock"], "absolute although not earlier than the sequence's clock"
        else:
            seq["clock"] += one(p, "timestamp")
            ts = seq["clock"]
        uuid = one(te, "track_uuid", seq["track"])
        assert uuid in tracks, f"track {uuid} used before it was declared"
        tab = seq["tables"]
        for field, name in (("name_iid", "event_names"), ("category_iids", "event_categories")):
            if field in te:
                assert te[field][0] in tab[name], f"{field} {te[field][0]} not defined on seq {sid}"
        args = {}
        for a in te.get("debug_annotations", []):
            k = tab["debug_annotation_names"][one(a, "name_iid")]
            if "string_value_iid" in a:
                iid = one(a, "string_value_iid")
                assert iid in tab["debug_annotation_string_values"], \
                    f"string value iid {iid} not defined on seq {sid}"
                v = tab["debug_annotation_string_values"][iid]
            elif "pointer_value" in a:
                v = hex(one(a, "pointer_value"))
            elif "double_value" in a:
                v = float(one(a, "double_value"))
            else:
                v = next(one(a, f) for f in ("uint_value", "int_value", "bool_value",
                                             "string_value") if f in a)
            assert k not in args, f"{k} twice in one event"
            args[k] = v
        timed.append((ts, i, uuid, te, args, tab))
    # the trace processor's order: by time, equal times in file order
    timed.sort(key=lambda x: (x[0], x[1]))
    events, stacks, flows = [], {}, {}
    for ts, _, uuid, te, args, tab in timed:
        kind, pid, tid = tracks[uuid]
        typ = one(te, "type")
        if typ == "TYPE_SLICE_END":
            stack = stacks.get(uuid)
            assert stack, f"END without an open slice on track {uuid} at {ts}"
            b = stack.pop()
            b["dur"] = ts - b["ts"]
            b["args"].update(args)
            b["_end_args"] = dict(args)
            continue
        if typ == "TYPE_COUNTER":
            v = one(te, "counter_value")
            if v is None:
                v = float(one(te, "double_counter_value"))
            events.append({"ph": "C", "pid": pid, "name": tid, "ts": ts, "value": v})
            continue
        ev = {"name": tab["event_names"][one(te, "name_iid")],
              "cat": tab["event_categories"][one(te, "category_iids")],
              "pid": pid, "tid": tid if kind == "thread" else None, "ts": ts, "args": args}
        if typ == "TYPE_SLICE_BEGIN":
            ev["ph"] = "X"
            ev["_begin_args"] = dict(args)
            stacks.setdefault(uuid, []).append(ev)
        elif "flow_ids" in te:
            ev["ph"], ev["id"] = "s", one(te, "flow_ids")
            assert ev["id"] not in flows, "flow started twice"
            flows[ev["id"]] = ts
        elif "terminating_flow_ids" in te:
            ev["ph"], ev["id"] = "f", one(te, "terminating_flow_ids")
            assert flows.pop(ev["id"], None) is not None, f"flow {ev['id']} ends, never started"
        else:
            assert typ == "TYPE_INSTANT", te
            ev["ph"] = "i"
        events.append(ev)
    assert not any(stacks.values()), f"slices never ended: {stacks}"
    assert not flows, f"flows never ended: {flows}"
    return clocks, events, thread_names


def key_of(e):
    if e["ph"] == "C":
        return ("C", e["pid"], e["name"], e["ts"], e["value"])
    args = tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in e["args"].items()))
    return (e["ph"], e["cat"], e["name"], e["pid"], e["tid"], e["ts"], e.get("dur"),
            e.get("id"), args)


def norm_json(trace, base):
    """The JSON's events as rebuild() gives them: absolute CLOCK_MONOTONIC ns, dim3 as its
    text, floats to the JSON's 3 decimals, instants' tid only where scoped to the thread."""
    out, thread_names = [], {}
    ns = lambda us: base + round(us * 1000)
    for e in trace["traceEvents"]:
        if e["ph"] == "M":
            if e["name"] == "thread_name":
                thread_names[(e["pid"], e["tid"])] = e["args"]["name"]
            continue
        if e["ph"] == "C":
            for k, v in e["args"].items():
                out.append({"ph": "C", "pid": e["pid"], "name": e["name"], "ts": ns(e["ts"]),
                            "value": v})
            continue
        args = {k: (json.dumps(v).replace(",", ", ").replace(",  ", ", ")
                    if isinstance(v, list) else v) for k, v in e.get("args", {}).items()}
        ev = {"ph": e["ph"], "cat": e.get("cat"), "name": e["name"], "pid": e["pid"],
              "tid": e["tid"] if e.get("s", "t") == "t" else None, "ts": ns(e["ts"]),
              "args": args}
        if e["ph"] == "X":
            ev["dur"] = round(e["dur"] * 1000)
            if ev["dur"] == 0:
                ev["ph"] = "i"      # the .pftrace's INSTANT: the same dur-0 slice
                del ev["dur"]
        if e["ph"] in "sf":
            ev["id"] = int(e["id"])
        out.append(ev)
    return out, thread_names


def round_floats(e):
    if "args" in e:
        e["args"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in e["args"].items()}
    return e


def check_opened_at_entry(events):
    """Calls with a return: BEGIN at entry with the entry's args, END with the rest."""
    calls = [e for e in events if e["ph"] == "X" and e["cat"] in ("cuda_runtime", "nccl") and
             ("rc" in e["args"] or e["args"].get("unfinished") is True)]
    assert calls, "no call with a return"
    for c in calls:
        b, end = c["_begin_args"], c["_end_args"]
        assert "correlation" in b or "correlation" in end, c
        assert "rc" not in b and "unfinished" not in b, f"BEGIN knows the end: {c}"
        assert ("rc" in end) != ("unfinished" in end), f"END without its end: {c}"
        # nothing said twice with the same value
        assert not [k for k in end if k in b and b[k] == end[k]], c
        if c["name"] == "cudaStreamSynchronize":
            assert "stream" in b, f"the sync's stream not on its BEGIN: {c}"
    return calls


def compare(json_trace, pf_path):
    clocks, pf_events, pf_threads = rebuild(decode(pf_path), json_trace)
    # the JSON's ts 0 (tptrace mem's trace does not say it: then the timestamps below do)
    meta = json_trace.get("tptrace", {})
    if "base_mono_ns" in meta:
        assert clocks[3] == meta["base_mono_ns"], (clocks, meta["base_mono_ns"])
    assert clocks[1] == json_trace["baseTimeNanoseconds"]
    js_events, js_threads = norm_json(json_trace, clocks[3])
    # durations: the JSON has them to the ns as well ("%.3f" us)
    strip = lambda e: {k: v for k, v in e.items() if not k.startswith("_")}
    js = sorted(key_of(round_floats(e)) for e in js_events)
    pf = sorted(key_of(round_floats(strip(e))) for e in pf_events)
    assert len(js) == len(pf), (len(js), len(pf))
    diff = [(a, b) for a, b in zip(js, pf) if a != b]
    assert not diff, diff[:5]
    gpus = {e["pid"] for e in json_trace["traceEvents"] if e["ph"] == "M" and
            e["name"] == "process_name" and e["args"]["name"].startswith("GPU ")}
    for k, v in js_threads.items():
        if k[0] not in gpus:       # host threads; GPU streams were mapped by name above
            assert pf_threads.get(k) == v, (k, v, pf_threads.get(k))
    return pf_events


def test_pftrace_same_events_as_json_gpu_job():
    need_root()
    need_ptrace()
    pf_path = tmp_path("pftrace-gpu.pftrace")
    if os.path.exists(pf_path):
        os.unlink(pf_path)
    trace, wl, tr = trace_workload(
        [os.path.join(WL, "sim_train"), "--steps", "3", "--kernel-us", "300"],
        tracer_args=["--gpu", "--mem"], out_name="pftrace-gpu.json",
        tracer_env={"TPTRACE_TRACE_TEE": pf_path})
    events = compare(trace, pf_path)
    by = lambda ph: [e for e in events if e["ph"] == ph]
    # what makes the comparison worth something: every kind of event is there
    kernels = [e for e in by("X") if e["cat"] == "kernel"]
    assert len(kernels) == 12 and all(e["tid"] is not None for e in kernels), kernels[:2]
    assert len(by("s")) == len(by("f")) == 18, (len(by("s")), len(by("f")))
    assert {e["id"] for e in by("s")} == {e["id"] for e in by("f")}
    assert len([e for e in by("X") if e["name"] == "cudaLaunchKernel"]) == 12
    assert by("C"), "no memory counters"
    check_opened_at_entry(events)


def test_pftrace_durations_gpu_join_on_end():
    """--durations --gpu: every call returns, so launches too are opened at their entry with
    the correlation they had then; the join decides them later and gives CUPTI's correlation
    (and the kernel's stream): that goes on the END, and the slice, merged as the trace
    processor merges (the END's value wins), has the JSON's."""
    need_root()
    need_ptrace()
    pf_path = tmp_path("pftrace-durations.pftrace")
    if os.path.exists(pf_path):
        os.unlink(pf_path)
    trace, wl, tr = trace_workload(
        [os.path.join(WL, "sim_train"), "--steps", "2", "--kernel-us", "100"],
        tracer_args=["--gpu", "--durations"], out_name="pftrace-durations.json",
        tracer_env={"TPTRACE_TRACE_TEE": pf_path})
    events = compare(trace, pf_path)
    launches = [c for c in check_opened_at_entry(events) if c["name"] == "cudaLaunchKernel"]
    assert len(launches) == 8, launches
    # the join's correlation replaced the entry's: on the END, and it is the slice's
    joined = [c for c in launches if "correlation" in c["_end_args"]]
    assert len(joined) == 8, launches
    for c in joined:
        assert c["_begin_args"]["correlation"] != c["_end_args"]["correlation"], c
        assert c["args"]["correlation"] == c["_end_args"]["correlation"], c
        assert "kernel" in c["_begin_args"] and "grid" in c["_begin_args"], c


def test_pftrace_gz_and_bad_outputs():
    need_root()
    need_ptrace()
    pf_path = tmp_path("pftrace-plain.pftrace.gz")
    trace, wl, tr = trace_workload(
        [os.path.join(WL, "sim_train"), "--steps", "2", "--kernel-us", "100"],
        out_name="pftrace-plain.json", tracer_env={"TPTRACE_TRACE_TEE": pf_path})
    assert open(pf_path, "rb").read(2) == b"\x1f\x8b"
    events = compare(trace, pf_path)
    assert len([e for e in events if e["name"] == "cudaLaunchKernel"]) == 8
    # without --gpu a launch has no duration: one INSTANT each
    assert {e["ph"] for e in events if e["name"] == "cudaLaunchKernel"} == {"i"}
    syncs = [c for c in check_opened_at_entry(events) if c["name"] == "cudaStreamSynchronize"]
    assert len(syncs) == 2 and all(set(c["_end_args"]) == {"rc"} for c in syncs), syncs


def test_pftrace_unwritable_and_full_disk():
    """As for JSON (test_cli.test_unwritable_output): one line, exit 1."""
    need_root()
    wl = Workload([os.path.join(E2E_BIN, "real_args")])
    full = tmp_path("full.pftrace")
    try:
        rc, _, err = run_tptrace(["-p", str(wl.pid), "-o", "/nonexistent-dir/t.pftrace"])
        assert rc == 1
        assert one_line(err) == \
            "tptrace: cannot write /nonexistent-dir/t.pftrace: No such file or directory", err
        # a full disk, through a .pftrace name (the suffix picks the format)
        if os.path.lexists(full):
            os.unlink(full)
        os.symlink("/dev/full", full)
        tr = Tracer(["-p", str(wl.pid), "-o", full, "-d", "0.5"])
        rc = tr.wait(20)
        assert rc == 1
        errs = [l for l in tr.err.text().splitlines() if "failed" in l]
        assert errs == [f"tptrace: writing {full} failed: No space left on device; "
                        "the trace is incomplete"], tr.err.text()
        assert os.path.exists("/dev/full")
    finally:
        wl.kill()
        if os.path.lexists(full):
            os.unlink(full)


def test_pftrace_same_events_as_json_memory():
    """`tptrace mem --trace`: memory instants (thread and process scoped) and the counter
    tracks, through the same writer."""
    need_root()
    import test_mem
    snap, js = tmp_path("pftrace-mem-snap.json"), tmp_path("pftrace-mem.json")
    pf_path = tmp_path("pftrace-mem.pftrace")
    # the OOM scenario: its OOM instants are process scoped ("s":"p")
    test_mem.run_alloc("oom", ["-o", snap, "--trace", js], "oom",
                       env={"TPSIM_MEM_LIMIT_BYTES": str(64 << 20)},
                       tracer_env={"TPTRACE_TRACE_TEE": pf_path})
    trace = load_trace(js)
    events = compare(trace, pf_path)
    counters = [e for e in events if e["ph"] == "C"]
    names = {e["name"] for e in counters}
    assert "bytes allocated (cuda:0)" in names and "bytes reserved (cuda:0)" in names, names
    ooms = [e for e in events if e["ph"] == "i" and e["name"] == "OOM"]
    assert len(ooms) == 2 and all(e["tid"] is None for e in ooms), ooms


def test_pftrace_py_stacks_nested():
    """--py-stacks: Python frames are slices opened when the call that enters them is seen
    (SLICE_BEGIN then, their args on the SLICE_END), at the same time as that call, which is
    written when it completes. Sorted as the trace processor sorts, every call must land inside
    its frames: the JSON's python_function slices and calls, nested the same way."""
    import test_pystacks_trace as pst
    pf_path = tmp_path("pftrace-pystacks.pftrace")
    if os.path.exists(pf_path):
        os.unlink(pf_path)
    trace, wl, tr, exp = pst.run(pst.DEBIAN_PY, pst.SIM_CUDART, "pftrace-pystacks",
                                 tracer_env={"TPTRACE_TRACE_TEE": pf_path})
    events = compare(trace, pf_path)
    frames = [e for e in events if e.get("cat") == "python_function"]
    assert len(frames) >= 10, len(frames)
    # nesting: on each thread, every call lies inside the frames open at its start, and the
    # frames chain by "Python parent id" as the JSON's do
    by_id = {e["args"]["Python id"]: e for e in frames}
    for f in frames:
        parent = f["args"].get("Python parent id")
        if parent is not None:
            p = by_id[parent]
            assert (p["pid"], p["tid"]) == (f["pid"], f["tid"])
            assert p["ts"] <= f["ts"] and f["ts"] + f["dur"] <= p["ts"] + p["dur"], (p, f)
    calls = [e for e in events if e.get("cat") == "cuda_runtime" and e["ph"] == "X"]
    inside = [c for c in calls if any(
        (f["pid"], f["tid"]) == (c["pid"], c["tid"]) and f["ts"] <= c["ts"] and
        c["ts"] + c["dur"] <= f["ts"] + f["dur"] for f in frames)]
    assert len(inside) >= len(exp) - 1, (len(inside), len(exp))


def test_pftrace_unfinished_call():
    """-d expires while the target is blocked in a sync: the call is written unfinished up to
    the trace's end, as in the JSON, and its slice is closed (BEGIN and END balance)."""
    need_root()
    import test_lifecycle as lc
    out, pf_path = tmp_path("pftrace-blocked.json"), tmp_path("pftrace-blocked.pftrace")
    if os.path.exists(pf_path):
        os.unlink(pf_path)
    saved = os.environ.get("TPTRACE_TRACE_TEE")
    os.environ["TPTRACE_TRACE_TEE"] = pf_path
    try:
        wl, tr, _ = lc.blocked_in_sync(out, ["-d", "1.5"])
    finally:
        if saved is None:
            del os.environ["TPTRACE_TRACE_TEE"]
        else:
            os.environ["TPTRACE_TRACE_TEE"] = saved
    try:
        rc = tr.wait(20)
    finally:
        wl.kill()
    assert rc == 0, tr.err.text()
    trace = load_trace(out)
    lc.check_unfinished_sync(trace, wl, 0)
    events = compare(trace, pf_path)
    unfinished = [e for e in events if e["args"].get("unfinished") is True]
    assert [e["name"] for e in unfinished] == ["cudaStreamSynchronize"], unfinished
    # its BEGIN was written when it entered: the entry's args, not the end's; the END (at the
    # trace's end) says only that it did not return
    check_opened_at_entry(events)
    sync = unfinished[0]
    assert sync["_end_args"] == {"unfinished": True}, sync
    assert {"stream", "correlation"} <= set(sync["_begin_args"]), sync
