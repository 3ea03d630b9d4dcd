#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The trace checks of tests/gpu/check.sh: our trace (tptrace --gpu) against torch.profiler's
(Kineto) trace of the same phases of the same job. Prints PASS/FAIL/WARN/INFO lines; exit 1
when anything failed.

Usage: validate.py OURS.json KINETO.json PHASES.log STEPS
PHASES.log holds the job's "PHASE name mono_t0_ns mono_t1_ns" lines (eager, compiled, graph).

Event shapes assumed (tptrace): host calls are "X" events of cat cuda_runtime / cuda_driver
named after the probed symbol (cudaLaunchKernel, cuLaunchKernel, cuLaunchKernelEx,
cudaGraphLaunch, cuGraphLaunch, cudaMemcpyAsync ...) with args "correlation", "kernel",
"kernel source", "grid", "block", "stream" (copies: "bytes", "kind"); GPU work is "X" on
pid = device, tid = stream: cat kernel (args correlation, stream, "graph id"), gpu_memcpy
("Memcpy HtoD (...)", args bytes); arrows are ac2g "s" (host: pid, tid, ts of the launch) /
"f" (device, stream, ts of the kernel) sharing id = correlation; metadata in top-level
"tptrace": base_mono_ns, targets[].gpu {clock_residual_ns, clock_samples, ...}, gpu_join
{calls, joined, unjoined {before_enable, no_record, ambiguous}, flows, api_records_unclaimed
{nested, unprobed, ambiguous}, gpu_work_unclaimed, slack_ns} (README, "How host calls are
joined")."""
import collections
import gzip
import json
import re
import sys

CLOCK_RESIDUAL_BOUND_NS = 50_000
LAUNCH_RE = re.compile(r"^(__)?(cudaLaunch|cuLaunch|cudaGraphLaunch|cuGraphLaunch)")
GRAPH_RE = re.compile(r"^(cudaGraphLaunch|cuGraphLaunch)")
DRIVER_LAUNCHES = ("cuLaunchKernel", "cuLaunchKernelEx")
HTOD_BYTES, DTOH_BYTES = 4 << 20, 4096

ok = True


def res(good, what):
    global ok
    print(("PASS " if good else "FAIL ") + what)
    ok = ok and bool(good)


def warn(what):
    print("WARN " + what)


def info(what):
    print("INFO " + what)


def load(p):
    with (gzip.open if p.endswith(".gz") else open)(p, "rt") as f:
        return json.load(f)


def ns(ts_us):
    return round(ts_us * 1000)


def is_launch(e):
    return (e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
            and LAUNCH_RE.match(e.get("name", "")) and "cbid" not in e.get("args", {}))


def seq_per_stream(launches, kernels_of):
    """stream -> kernel names in launch order (then kernel start)."""
    seq = collections.defaultdict(list)
    for l in sorted(launches, key=lambda e: e["ts"]):
        for k in sorted(kernels_of(l), key=lambda k: k["ts"]):
            seq[k["tid"]].append(k["name"])
    return dict(seq)


def first_difference(a, b):
    for s in sorted(set(a) | set(b)):
        x, y = a.get(s, []), b.get(s, [])
        if x != y:
            i = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            return (f"stream {s}: ours {len(x)} kernels, kineto {len(y)}; first difference at "
                    f"{i}: ours {x[i][:60] if i < len(x) else None!r}, "
                    f"kineto {y[i][:60] if i < len(y) else None!r}")
    return ""


def main(ours_path, kineto_path, log_path, steps):
    ours = load(ours_path)
    meta = ours.get("tptrace", {})
    base = int(meta.get("base_mono_ns", 0))
    res(base > 0, "our trace has tptrace.base_mono_ns")
    phases = {}
    for line in open(log_path):
        f = line.split()
        if f and f[0] == "PHASE":
            phases[f[1]] = (int(f[2]), int(f[3]))
    info(f"phases: {sorted(phases)}")

    evs = ours["traceEvents"]
    mono = lambda e: base + ns(e["ts"])
    in_phase = lambda e, p: phases[p][0] <= mono(e) <= phases[p][1]
    launches = [e for e in evs if is_launch(e)]
    kernels = [e for e in evs if e.get("ph") == "X" and e.get("cat") == "kernel"]
    host = [e for e in evs if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
            and "cbid" not in e.get("args", {})]
    host_at = {(e["pid"], e["tid"], ns(e["ts"])): e for e in host}
    kern_at = {(e["pid"], e["tid"], ns(e["ts"])): e for e in evs
               if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    starts = {e["id"]: e for e in evs if e.get("cat") == "ac2g" and e.get("ph") == "s"}
    ends = {e["id"]: e for e in evs if e.get("cat") == "ac2g" and e.get("ph") == "f"}

    # ---- arrows: each one a launch -> a kernel of the same correlation ----
    bad, named_mismatch, arrow_of = [], [], collections.defaultdict(list)
    for i, s in starts.items():
        f = ends.get(i)
        h = host_at.get((s["pid"], s["tid"], ns(s["ts"])))
        k = f and kern_at.get((f["pid"], f["tid"], ns(f["ts"])))
        # a launch's arrow ends at a kernel, a copy's at a copy, a memset's at a memset
        want = ("kernel" if h and is_launch(h) else "gpu_memcpy" if h and "Memcpy" in h["name"]
                else "gpu_memset" if h and "Memset" in h["name"] else None)
        if not h or not k or k["cat"] != want or str(h["args"].get("correlation")) != str(i) or \
                str(k["args"].get("correlation")) != str(i):
            bad.append(i)
            continue
        if want != "kernel":
            arrow_of[id(h)].append(k)
            continue
        arrow_of[id(h)].append(k)
        hk = h["args"].get("kernel", "")
        if (not GRAPH_RE.match(h["name"]) and h["args"].get("kernel source") != "unresolved"
                and not hk.startswith("_Z") and hk != k["name"]):
            named_mismatch.append((h["name"], hk[:50], k["name"][:50]))
    res(starts and not bad, f"{len(starts)} ac2g arrows, each from a launch to a kernel (a copy "
        f"to a copy) of its correlation ({len(bad)} not: {bad[:5]})")
    res(not named_mismatch, f"each arrow's kernel is the kernel its launch names "
        f"({len(named_mismatch)} not: {named_mismatch[:3]})")
    gpu = (meta.get("targets") or [{}])[0].get("gpu", {})
    join = meta.get("gpu_join")
    if not isinstance(join, dict) or join.get("calls") is None:
        res(False, f"the trace has no gpu_join counts: {join!r}")
    else:
        info("join: " + json.dumps(join, sort_keys=True))
        res(join["flows"] == len(starts),
            f"gpu_join flows {join['flows']} = arrows in the trace {len(starts)}")
        # an ambiguous window means a probe and CUPTI disagree on what the thread called
        res(join["unjoined"]["ambiguous"] == 0 and join["api_records_unclaimed"]["ambiguous"] == 0,
            f"no ambiguous join ({join['unjoined']}, {join['api_records_unclaimed']})")
        if join["unjoined"]["no_record"]:
            warn(f"{join['unjoined']['no_record']} host calls found no CUPTI record "
                 f"(dropped buffers?)")

    # ---- Kineto: the reference pairing ----
    try:
        kin = load(kineto_path)["traceEvents"]
    except (OSError, ValueError, KeyError) as ex:
        res(False, f"torch.profiler trace {kineto_path} unreadable: {ex}")
        kin = []
    kk_by_corr = collections.defaultdict(list)
    for e in kin:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            kk_by_corr[e.get("args", {}).get("correlation")].append(e)
    ann = {e["name"][len("tpcheck:"):]: (e["ts"], e["ts"] + e["dur"]) for e in kin
           if e.get("ph") == "X" and e.get("name", "").startswith("tpcheck:")
           and e.get("cat") in ("user_annotation", "cpu_op")}
    kl = [e for e in kin if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
          and kk_by_corr.get(e.get("args", {}).get("correlation"))]

    for p in ("eager", "compiled", "graph"):
        if p not in phases:
            continue
        mine = [l for l in launches if in_phase(l, p)]
        res(mine, f"{p}: {len(mine)} host launch events "
            f"({dict(collections.Counter(l['name'] for l in mine))})")
        src = collections.Counter(l["args"].get("kernel source", "none") for l in mine
                                  if not GRAPH_RE.match(l["name"]))
        info(f"{p}: kernel naming path (\"kernel source\" counts): {dict(src)}")
        unres = [l for l in mine if l["args"].get("kernel source") == "unresolved" and arrow_of.get(id(l))]
        res(not unres, f"{p}: no joined launch left unresolved ({len(unres)})")
        ours_seq = seq_per_stream(mine, lambda l: arrow_of.get(id(l), []))
        if p not in ann:
            res(False, f"{p}: no tpcheck:{p} range in the Kineto trace")
            continue
        t0, t1 = ann[p]
        theirs = [e for e in kl if t0 <= e["ts"] <= t1]
        kin_seq = seq_per_stream(theirs, lambda l: kk_by_corr[l["args"]["correlation"]])
        diff = first_difference(ours_seq, kin_seq)
        res(not diff and ours_seq, f"{p}: kernel names per stream joined to our launches = Kineto's "
            f"({ {s: len(v) for s, v in ours_seq.items()} })" + (": " + diff if diff else ""))
        if p == "eager":
            # nested driver launches are recorded once (the runtime call only)
            rt = [l for l in mine if l["cat"] == "cuda_runtime"]
            nested = [d for d in mine if d["cat"] == "cuda_driver" and any(
                r["tid"] == d["tid"] and r["ts"] <= d["ts"] <= r["ts"] + r.get("dur", 0) for r in rt)]
            res(not nested, f"eager: no driver launch recorded inside a runtime launch ({len(nested)})")
            copies = [e for e in evs if e.get("cat") == "gpu_memcpy" and in_phase(e, p)]
            htod = [c for c in copies if "HtoD" in c["name"] and c.get("args", {}).get("bytes") == HTOD_BYTES]
            dtoh = [c for c in copies if "DtoH" in c["name"] and c.get("args", {}).get("bytes") == DTOH_BYTES]
            res(len(htod) == steps and len(dtoh) == steps,
                f"eager: GPU copies HtoD {HTOD_BYTES} B x{len(htod)}, DtoH {DTOH_BYTES} B x{len(dtoh)} "
                f"(want {steps} each)")
            hc = [e for e in evs if e.get("cat") == "cuda_runtime" and e.get("name", "").startswith("cudaMemcpy")
                  and in_phase(e, p) and e.get("args", {}).get("bytes") == HTOD_BYTES
                  and e.get("args", {}).get("kind") == "HtoD"]
            res(len(hc) == steps, f"eager: host cudaMemcpy* HtoD {HTOD_BYTES} B x{len(hc)} (want {steps})")
            ha = [h for h in hc if [c["args"].get("bytes") for c in arrow_of.get(id(h), [])] == [HTOD_BYTES]]
            res(hc and len(ha) == len(hc), f"eager: {len(ha)} of {len(hc)} host HtoD copies have an arrow "
                "to their GPU copy of the same size")
        if p == "compiled":
            drv = [l for l in mine if l["cat"] == "cuda_driver" and l["name"] in DRIVER_LAUNCHES]
            tri = [l for l in drv if l["args"].get("kernel", "").startswith("triton_")]
            res(drv and len(tri) == len(drv), f"compiled: {len(drv)} cuLaunchKernel/cuLaunchKernelEx "
                f"events (cat cuda_driver), {len(tri)} name triton_* kernels "
                f"({sorted({l['args'].get('kernel', '')[:40] for l in drv})[:4]})")
            arrowed = [l for l in tri if any(k["name"] == l["args"]["kernel"] for k in arrow_of.get(id(l), []))]
            res(tri and len(arrowed) == len(tri), f"compiled: {len(arrowed)} of {len(tri)} Triton launches "
                "have an arrow to their kernel")
            g = [l for l in tri if l["args"].get("grid") and l["args"].get("block")]
            res(len(g) == len(tri), f"compiled: grid and block on {len(g)} of {len(tri)} Triton launches")
        if p == "graph":
            gl = [l for l in mine if GRAPH_RE.match(l["name"])]
            res(len(gl) == steps, f"graph: {len(gl)} cudaGraphLaunch/cuGraphLaunch events "
                f"(want {steps}, one per replay: the nested driver call once)")
            gk = [k for k in kernels if in_phase(k, p) and "graph id" in k["args"]]
            res(gk and len(gk) % steps == 0, f"graph: {len(gk)} kernels with a graph id "
                f"({len(gk) / steps:g} per replay)")
            ga = [l for l in gl if any("graph id" in k["args"] for k in arrow_of.get(id(l), []))]
            res(gl and len(ga) == len(gl), f"graph: {len(ga)} of {len(gl)} graph launches have arrows "
                "to graph kernels")

    res(gpu.get("clock_samples", 0) > 0 and gpu.get("clock_residual_ns", 1e18) <= CLOCK_RESIDUAL_BOUND_NS,
        f"clock_residual_ns {gpu.get('clock_residual_ns')} <= {CLOCK_RESIDUAL_BOUND_NS} "
        f"({gpu.get('clock_samples')} samples)")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: validate.py OURS.json KINETO.json PHASES.log STEPS")
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
