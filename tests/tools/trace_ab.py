"""A/B check for refactors (not part of the suite; root): the same simulated jobs traced by two
tptrace binaries (A=... B=..., e.g. a build of the base commit and this tree's), compared after
what two runs of one binary cannot repeat is replaced: times (ts, dur), pids and tids (and the
process sort index, the pid), addresses (0x..., by order of first appearance), the memory
tracer's measured duration_us, thread names (/proc comm, read while the workload may still be
naming its thread), the order between the CUDA and memory rings (kept within each category);
of the metadata, its integer counts are compared.
Usage: A=/path/base/tptrace B=./tptrace python3 tests/tools/trace_ab.py"""
import json, os, re, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
import lib

def norm(trace, pid):
    ids, addrs = {}, {}
    def idmap(v):
        return ids.setdefault(v, f"ID{len(ids)}")
    def walk(o):
        if isinstance(o, dict):
            out = {}
            for k, v in o.items():
                if k in ("ts", "dur"):
                    out[k] = "T"
                elif k in ("pid", "tid", "sort_index") and isinstance(v, int):
                    out[k] = idmap(v)
                else:
                    out[k] = walk(v)
            return out
        if isinstance(o, list):
            return [walk(x) for x in o]
        if isinstance(o, str):
            o = re.sub(r"\b\d{3,7}\b", lambda m: idmap(int(m.group())) if int(m.group()) in ids else m.group(), o)
            return re.sub(r"0x[0-9a-f]{6,}", lambda m: addrs.setdefault(m.group(), f"ADDR{len(addrs)}"), o)
        return o
    idmap(pid)
    evs = walk(trace["traceEvents"])
    # two rings (CUDA, memory) interleave by when each was polled: order within a category
    evs = [e for c in sorted({e.get("cat", "") for e in evs}) for e in evs if e.get("cat", "") == c]
    for e in evs:
        e.get("args", {}).pop("duration_us", None)	# the memory tracer's own measure
        if e.get("name") == "thread_name":
            e["args"]["name"] = "N"	# /proc comm read while the workload names its thread
    meta = {k: v for k, v in trace["tptrace"].items() if isinstance(v, int) and not k.endswith("_ns")}
    return evs, meta

def run(binary, argv, args, name):
    os.environ["TPTRACE_BIN"] = binary
    lib.TPTRACE = binary
    trace, wl, tr = lib.trace_workload(argv, tracer_args=args, out_name=name)
    return norm(trace, wl.pid)

WL = lib.WL
jobs = [
    ("sim_train", [os.path.join(WL, "sim_train"), "--steps", "6", "--threads", "1", "--kernel-us", "2000"], []),
    ("sim_train_durations", [os.path.join(WL, "sim_train"), "--steps", "4", "--threads", "1", "--kernel-us", "1000"], ["--durations"]),
    ("sim_train_gpu", [os.path.join(WL, "sim_train"), "--steps", "4", "--threads", "1", "--kernel-us", "1000"], ["--gpu"]),
    ("mem_nested_app_mem", [os.path.join(WL, "mem_nested_app")], ["--mem"]),
]
bad = 0
A = os.environ["A"]
B = os.environ.get("B", os.path.join(lib.ROOT, "tptrace"))
for name, argv, args in jobs:
    a = run(A, argv, args, name + "-base.json")
    b = run(B, argv, args, name + "-new.json")
    sa, sb = json.dumps(a, sort_keys=True), json.dumps(b, sort_keys=True)
    print(f"{name}: {len(a[0])} events, {len(a[1])} counts:", "identical" if sa == sb else "DIFFER")
    if sa != sb:
        bad += 1
        for x, y in zip(a[0], b[0]):
            if x != y:
                print(" base", x, "\n new ", y)
                break
        if a[1] != b[1]:
            print(" meta base", a[1], "\n meta new ", b[1])
sys.exit(1 if bad else 0)
