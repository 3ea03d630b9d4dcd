"""Tier 2: `-o FILE.pftrace` (Perfetto's protobuf format, user/trace_pftrace.c). One tptrace run
writes both traces of the same events: the JSON through -o, the .pftrace through
TPTRACE_TRACE_TEE (a test-only knob of trace_json: the same calls fanned out to a second
output; two runs could not be compared event by event). The .pftrace is decoded with
`protoc --decode=perfetto.protos.Trace proto/perfetto_trace.proto` (the schema the writer is
generated from) and rebuilt into Chrome-JSON-like events: interned names, categories and
argument keys resolved, slices from BEGIN/END pairs, tracks back to (pid, tid) through their
descriptors (GPU streams by name), flows, counters and timestamps through the ClockSnapshot.
Then every event of the JSON must be there with the same name, category, track, timestamp,
duration and args, and nothing else."""
import codecs
import gzip
import json
import os
import re
import subprocess
from gpulib import need_ptrace
from lib import (E2E_BIN, ROOT, WL, Tracer, Workload, load_trace, need_root, run_tptrace,
                 tmp_path, trace_workload)

PROTO_DIR = os.path.join(ROOT, "proto")


def one_line(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"want one error line, got {lines!r}"
    return lines[0]


def decode(path):
    """The .pftrace as protoc's text format, parsed to nested dicts (repeated: lists)."""
    data = open(path, "rb").read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    p = subprocess.run(["protoc", "--proto_path=" + PROTO_DIR, "--decode=perfetto.protos.Trace",
                        "perfetto_trace.proto"], input=data, capture_output=True)
    assert p.returncode == 0, p.stderr.decode()
    stack = [{}]
    for line in p.stdout.decode().splitlines():
        line = line.strip()
        if line == "}":
            stack.pop()
        elif line.endswith("{"):
            child = {}
            stack[-1].setdefault(line[:-1].strip(), []).append(child)
            stack.append(child)
        else:
            key, val = line.split(": ", 1)
            if val.startswith('"'):
                val = codecs.escape_decode(val[1:-1].encode())[0].decode()
            elif re.fullmatch(r"-?\d+", val):
                val = int(val)
            elif re.fullmatch(r"-?[\d.e+-]+|inf|-inf|nan", val):
                val = float(val)
            elif val in ("true", "false"):
                val = val == "true"
            stack[-1].setdefault(key, []).append(val)
    assert len(stack) == 1, "unbalanced protoc output"
    return stack[0].get("packet", [])


def one(d, k, default=None):
    return d[k][0] if k in d else default


def rebuild(packets, json_trace):
    """Chrome-JSON-like events from the packets, keyed as norm_json() keys the JSON's."""
    assert packets, "empty trace"
    first = packets[0]
    assert one(first, "sequence_flags") == 3 and one(first, "first_packet_on_sequence")
    clocks = {one(c, "clock_id"): one(c, "timestamp")
              for c in one(first, "clock_snapshot")["clocks"]}
    assert set(clocks) == {1, 3, 6}, clocks       # REALTIME, MONOTONIC, BOOTTIME
    assert one(one(first, "trace_packet_defaults"), "timestamp_clock_id") == 3
    # GPU tracks carry names only: back to the JSON's (device, stream) through its metadata
    gpu_pid, stream_tid = {}, {}
    for e in json_trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"].startswith("GPU "):
            gpu_pid[e["args"]["name"]] = e["pid"]
    for e in json_trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] in gpu_pid.values():
            stream_tid[(e["pid"], e["args"]["name"])] = e["tid"]
    names, cats, keys, strs = {}, {}, {}, {}
    tracks, events, open_slices = {}, [], {}
    thread_names = {}
    seen_cleared = False
    for p in packets:
        assert one(p, "trusted_packet_sequence_id") == 1, p
        if one(p, "sequence_flags", 0) & 1:
            seen_cleared = True
        idata = one(p, "interned_data")
        if idata:
            for tab, field in ((names, "event_names"), (cats, "event_categories"),
                               (keys, "debug_annotation_names")):
                for ent in idata.get(field, []):
                    assert one(ent, "iid") not in tab, "iid defined twice"
                    tab[one(ent, "iid")] = one(ent, "name")
            for ent in idata.get("debug_annotation_string_values", []):
                strs[one(ent, "iid")] = one(ent, "str")
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
        assert seen_cleared and one(p, "sequence_flags", 2) & 2
        ts = one(p, "timestamp")
        kind, pid, tid = tracks[one(te, "track_uuid")]
        typ = one(te, "type")
        if typ == "TYPE_SLICE_END":
            b = open_slices.pop(one(te, "track_uuid"))
            b["dur"] = ts - b["ts"]
            continue
        if typ == "TYPE_COUNTER":
            v = one(te, "counter_value")
            if v is None:
                v = float(one(te, "double_counter_value"))
            events.append({"ph": "C", "pid": pid, "name": tid, "ts": ts, "value": v})
            continue
        args = {}
        for a in te.get("debug_annotations", []):
            k = keys[one(a, "name_iid")]
            if "string_value_iid" in a:
                v = strs[one(a, "string_value_iid")]
            elif "pointer_value" in a:
                v = hex(one(a, "pointer_value"))
            elif "double_value" in a:       # protoc prints 1269.0 as 1269
                v = float(one(a, "double_value"))
            else:
                v = next(one(a, f) for f in ("uint_value", "int_value", "double_value",
                                             "bool_value", "string_value") if f in a)
            args[k] = v
        ev = {"name": names[one(te, "name_iid")], "cat": cats[one(te, "category_iids")],
              "pid": pid, "tid": tid if kind == "thread" else None, "ts": ts, "args": args}
        if typ == "TYPE_SLICE_BEGIN":
            assert one(te, "track_uuid") not in open_slices, "END must follow its BEGIN"
            ev["ph"] = "X"
            open_slices[one(te, "track_uuid")] = ev
        elif "flow_ids" in te:
            ev["ph"], ev["id"] = "s", one(te, "flow_ids")
        elif "terminating_flow_ids" in te:
            ev["ph"], ev["id"] = "f", one(te, "terminating_flow_ids")
        else:
            assert typ == "TYPE_INSTANT", te
            ev["ph"] = "i"
        events.append(ev)
    assert not open_slices, "slices never ended"
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
        if e["ph"] in "sf":
            ev["id"] = int(e["id"])
        out.append(ev)
    return out, thread_names


def round_floats(e):
    if "args" in e:
        e["args"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in e["args"].items()}
    return e


def compare(json_trace, pf_path):
    clocks, pf_events, pf_threads = rebuild(decode(pf_path), json_trace)
    # the JSON's ts 0 (tptrace mem's trace does not say it: then the timestamps below do)
    meta = json_trace.get("tptrace", {})
    if "base_mono_ns" in meta:
        assert clocks[3] == meta["base_mono_ns"], (clocks, meta["base_mono_ns"])
    assert clocks[1] == json_trace["baseTimeNanoseconds"]
    js_events, js_threads = norm_json(json_trace, clocks[3])
    # durations: the JSON has them to the ns as well ("%.3f" us)
    js = sorted(key_of(round_floats(e)) for e in js_events)
    pf = sorted(key_of(round_floats(e)) for e in pf_events)
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
