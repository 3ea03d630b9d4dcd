#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The trace checks of tests/gpu/check.sh: our trace (tptrace --gpu) against torch.profiler's
(Kineto) trace of the same phases of the same job. Prints PASS/FAIL/WARN/INFO lines; exit 1
when anything failed.

Usage: validate.py OURS.json KINETO.json PHASES.log STEPS
       validate.py --real CHECK OURS.json CONTEXT.json
PHASES.log holds the job's "PHASE name mono_t0_ns mono_t1_ns" lines (eager, compiled, graph).
--real: one check of a behaviour of the real stack that the simulated one models (check.sh
"the real stack"), CONTEXT.json holding what the job measured itself (its windows, pids, tids,
counts); CHECK is one of REAL_CHECKS. OURS.json may be "-" for the clock check, which reads
only CONTEXT.json (pairs of cuptiGetTimestamp and CLOCK_MONOTONIC reads).

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


# ---- the real stack's behaviours the simulated stack models (check.sh "the real stack") ----
# Each check takes our trace (dict) and the job's own account (dict) and returns a list of
# (kind, message), kind PASS/FAIL/WARN/INFO; run_real prints them. Pure functions: the suite
# tests them on synthetic traces (tests/e2e/test_gpu_check.py).

RESIDUAL_BOUND_NS = 1000
JOIN_RATE_MIN = 0.99


def _events(trace):
    return trace.get("traceEvents", [])


def _arrows(trace):
    """[(host launch event, GPU event)] joined by ac2g arrows (start at the host call's
    pid/tid/ts, finish at the GPU event's pid/tid/ts, one id)"""
    evs = _events(trace)
    host_at = {(e["pid"], e["tid"], ns(e["ts"])): e for e in evs if e.get("ph") == "X"
               and e.get("cat") in ("cuda_runtime", "cuda_driver")}
    gpu_at = {(e["pid"], e["tid"], ns(e["ts"])): e for e in evs if e.get("ph") == "X"
              and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    starts = {e["id"]: e for e in evs if e.get("cat") == "ac2g" and e.get("ph") == "s"}
    ends = {e["id"]: e for e in evs if e.get("cat") == "ac2g" and e.get("ph") == "f"}
    out = []
    for i, s in starts.items():
        f = ends.get(i)
        h = host_at.get((s["pid"], s["tid"], ns(s["ts"])))
        g = f and gpu_at.get((f["pid"], f["tid"], ns(f["ts"])))
        if h and g:
            out.append((h, g))
    return out


def _mono(trace):
    base = int(trace.get("tptrace", {}).get("base_mono_ns", 0))
    return lambda e: base + ns(e["ts"])


def _gpu_meta(trace, pid):
    for t in trace.get("tptrace", {}).get("targets", []):
        if t.get("pid") == pid:
            return t.get("gpu") or {}
    return {}


def check_threads(trace, ctx):
    """CUPTI's thread id: its default type is not the OS tid; the agent sets SYSTEM, so the
    job's launches join (>= 99 %) and every arrow starts on one of the job's OS threads"""
    out = []
    names = {0: "DEFAULT (pthread_self)", 1: "SYSTEM (gettid)"}
    d = ctx.get("default_thread_id_type")
    out.append(("INFO", f"CUPTI's default thread id type here: {names.get(d, d)}; in the probe "
                        f"process pthread_self {ctx.get('pthread_self')} vs gettid {ctx.get('gettid')}"))
    pid, tids = ctx["pid"], set(ctx["tids"])
    launches = [e for e in _events(trace) if is_launch(e) and e["pid"] == pid]
    joined = {id(h) for h, g in _arrows(trace) if h["pid"] == pid and g.get("cat") == "kernel"}
    n = len(launches)
    rate = sum(1 for l in launches if id(l) in joined) / n if n else 0.0
    j = trace.get("tptrace", {}).get("gpu_join") or {}
    out.append(("INFO", f"join: {j.get('joined')} of {j.get('calls')} host calls joined"))
    out.append(("PASS" if n and rate >= JOIN_RATE_MIN else "FAIL",
                f"{rate:.1%} of the job's {n} launches joined to a kernel (want >= "
                f"{JOIN_RATE_MIN:.0%}: the agent sets CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)"))
    foreign = sorted({h["tid"] for h, _ in _arrows(trace) if h["pid"] == pid} - tids)
    out.append(("PASS" if not foreign else "FAIL",
                f"every arrow starts on an OS thread of the job ({len(foreign)} not: {foreign[:5]})"))
    return out


def check_drops(trace, ctx):
    """tiny CUPTI buffers: records are dropped, and every kernel lost is counted (reported
    drops >= launches the trace has no kernel for: none lost silently)"""
    out = []
    pid, launched = ctx["pid"], ctx["launches"]
    g = _gpu_meta(trace, pid)
    mono = _mono(trace)
    w0, w1 = ctx["window"]
    kernels = [e for e in _events(trace) if e.get("ph") == "X" and e.get("cat") == "kernel"
               and w0 <= mono(e) <= w1 + 10**9]
    dropped = g.get("records_dropped")
    out.append(("INFO", f"buffers of {ctx.get('buf_bytes')} B: {launched} launches, {len(kernels)} "
                        f"kernel records in the trace, {dropped} records reported dropped "
                        f"(ring + cuptiActivityGetNumDroppedRecords as the agent read it; "
                        f"CUPTI's part: {g.get('records_dropped_cupti', 'not split in this build')})"))
    if dropped is None:
        out.append(("FAIL", "the trace reports no records_dropped for the job (unknown is not 0)"))
        return out
    if not dropped:
        out.append(("WARN" if len(kernels) >= launched else "FAIL",
                    f"no drop reported with {ctx.get('buf_bytes')} B buffers "
                    f"({launched - len(kernels)} kernels missing)"))
        return out
    missing = max(launched - len(kernels), 0)
    out.append(("PASS" if missing <= dropped else "FAIL",
                f"every lost kernel counted: {missing} missing <= {dropped} reported dropped"))
    return out


def check_clock(trace, ctx):
    """The GPU clock against CLOCK_MONOTONIC over the run, from the job's own reads (pairs of
    cuptiGetTimestamp between two CLOCK_MONOTONIC reads): offset, drift and how far a line
    through them misses any pair (what a linear alignment is left with); our alignment's
    residual from the trace; each probe kernel inside the host window around it"""
    out = []
    pairs = ctx.get("pairs") or []      # [[mono_before, cupti, mono_after], ...]
    if len(pairs) < 3:
        return [("FAIL", f"only {len(pairs)} clock pairs from the job")]
    xs = [(a + b) / 2 for a, _, b in pairs]
    ys = [c - x for (a, c, b), x in zip(pairs, xs)]            # offset at each read
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    resid = [abs(y - (my + slope * (x - mx))) for x, y in zip(xs, ys)]
    half = max((b - a) / 2 for a, _, b in pairs)
    span = (xs[-1] - xs[0]) / 1e9
    out.append(("INFO", f"GPU clock vs CLOCK_MONOTONIC over {span:.1f} s ({n} reads): offset "
                        f"{my:.0f} ns, drift {slope * 1e6:.3f} ppm, worst miss of a line "
                        f"{max(resid):.0f} ns (each read bracketed within +-{half:.0f} ns)"))
    out.append(("PASS" if max(resid) <= RESIDUAL_BOUND_NS + half else "FAIL",
                f"a linear alignment fits the GPU clock within {RESIDUAL_BOUND_NS} ns "
                f"(+ the read's own +-{half:.0f} ns): worst {max(resid):.0f} ns"))
    if trace is None:
        return out
    pid = ctx["pid"]
    g = _gpu_meta(trace, pid)
    r = g.get("clock_residual_ns")
    out.append(("PASS" if r is not None and r <= RESIDUAL_BOUND_NS else "FAIL",
                f"our alignment's clock_residual_ns {r} <= {RESIDUAL_BOUND_NS} "
                f"({g.get('clock_samples')} samples)"))
    mono = _mono(trace)
    worst, seen = 0, 0
    for h, k in _arrows(trace):
        if h["pid"] != pid or k.get("cat") != "kernel":
            continue
        for w0, w1 in ctx.get("probes", []):
            if w0 <= mono(h) <= w1:
                seen += 1
                ks, ke = mono(k), mono(k) + ns(k.get("dur", 0))
                worst = max(worst, w0 - ks, ke - w1)
    out.append(("PASS" if seen and worst <= RESIDUAL_BOUND_NS else "FAIL",
                f"{seen} probe kernels inside the host's [launch, sync return] windows within "
                f"{RESIDUAL_BOUND_NS} ns (worst {max(worst, 0)} ns outside)"))
    return out


def check_delivery(trace, ctx):
    """buffers completed late or out of order and records incomplete at a non-forced flush:
    counted by the agent where this build says so; whatever the order, each kernel is in the
    trace once and each correlation has at most one arrow"""
    out = []
    g = _gpu_meta(trace, ctx["pid"])
    keys = sorted(k for k in g if re.search(r"order|incomplete|late|flush", k))
    out.append(("INFO", "delivery counters: " + (", ".join(f"{k} {g[k]}" for k in keys)
                                                 if keys else "none reported by this build")))
    evs = _events(trace)
    kc = collections.Counter((e["pid"], e.get("args", {}).get("correlation")) for e in evs
                             if e.get("ph") == "X" and e.get("cat") == "kernel"
                             and e.get("args", {}).get("correlation") is not None)
    dup = [k for k, n in kc.items() if n > 1]
    out.append(("PASS" if not dup else "FAIL", f"no kernel record twice ({len(dup)} twice)"))
    ac = collections.Counter(e["id"] for e in evs if e.get("cat") == "ac2g" and e.get("ph") == "s")
    twice = [k for k, n in ac.items() if n > 1]
    out.append(("PASS" if not twice else "FAIL", f"no arrow id twice ({len(twice)})"))
    return out


def check_early(trace, ctx):
    """kernels that start before their launch call returns (the device idle): counted; none
    before the call began (that would be a clock error), and they are joined all the same"""
    mono = _mono(trace)
    pid = ctx["pid"]
    pairs = [(h, k) for h, k in _arrows(trace) if h["pid"] == pid and k.get("cat") == "kernel"
             and is_launch(h)]
    early = [(h, k) for h, k in pairs if mono(k) < mono(h) + ns(h.get("dur", 0))]
    before = [(h, k) for h, k in pairs if mono(k) < mono(h) - RESIDUAL_BOUND_NS]
    out = [("INFO", f"{len(early)} of {len(pairs)} joined kernels started before their launch "
                    f"call returned")]
    out.append(("PASS" if pairs and not before else "FAIL",
                f"no kernel starts before its launch call began ({len(before)} do)"))
    if not early:
        out.append(("WARN", "no kernel started before its launch returned: the case the "
                            "simulated stack models was not seen here"))
    return out


def check_nccl(trace, ctx):
    """NCCL (a 1-rank communicator here when there is one GPU): its kernels launched with
    cuLaunchKernelEx on a stream of its own, events between the user's stream and NCCL's,
    and compute overlapping communication when the job overlaps them"""
    out = []
    mono = _mono(trace)
    pid = ctx["pid"]
    w0, w1 = ctx["window"]
    inwin = lambda e: w0 <= mono(e) <= w1
    evs = _events(trace)
    arrows = [(h, k) for h, k in _arrows(trace) if h["pid"] == pid and k.get("cat") == "kernel"]
    nccl = [(h, k) for h, k in arrows if "nccl" in k["name"].lower() and inwin(k)]
    compute = [k for h, k in arrows if "nccl" not in k["name"].lower() and inwin(k)]
    out.append(("INFO", f"NCCL kernels joined: {len(nccl)} "
                        f"({sorted({k['name'][:40] for _, k in nccl})[:3]}), launched by "
                        f"{dict(collections.Counter(h['name'] for h, _ in nccl))}"))
    one_rank = ctx.get("nranks", 1) == 1
    if not nccl:
        # a 1-rank communicator may copy instead of launching: nothing to check it on
        return out + [("WARN" if one_rank else "FAIL",
                       f"no NCCL kernel joined in the window ({ctx.get('nranks', 1)} rank(s))")]
    ex = all(h["name"] == "cuLaunchKernelEx" for h, _ in nccl)
    out.append(("PASS" if ex else "WARN" if one_rank else "FAIL",
                "NCCL's kernels are launched with cuLaunchKernelEx" +
                ("" if ex or not one_rank else " (not on this 1-rank communicator's path)")))
    nstreams = {k["tid"] for _, k in nccl}
    ustreams = {k["tid"] for k in compute}
    out.append(("PASS" if nccl and compute and not nstreams & ustreams else "FAIL",
                f"NCCL's kernels on a stream of their own ({sorted(nstreams)[:3]}) apart from the "
                f"user's ({sorted(ustreams)[:3]})"))
    rec = [e for e in evs if e.get("ph") == "X" and e["pid"] == pid and inwin(e)
           and e.get("name") in ("cudaEventRecord", "cuEventRecord", "cudaEventRecordWithFlags",
                                 "cuEventRecordWithFlags")]
    wait = [e for e in evs if e.get("ph") == "X" and e["pid"] == pid and inwin(e)
            and e.get("name") in ("cudaStreamWaitEvent", "cuStreamWaitEvent")]
    out.append(("PASS" if rec and wait else "FAIL",
                f"events between the streams: {len(rec)} event records, {len(wait)} stream waits"))
    overlap = 0
    for _, n in nccl:
        n0, n1 = mono(n), mono(n) + ns(n.get("dur", 0))
        for c in compute:
            c0, c1 = mono(c), mono(c) + ns(c.get("dur", 0))
            overlap += max(0, min(n1, c1) - max(n0, c0))
    want = ctx.get("overlap_expected", True)
    out.append(("PASS" if (overlap > 0) == want else "FAIL" if want else "WARN",
                f"compute overlapping NCCL: {overlap} ns (the job {'does' if want else 'does not'} "
                "overlap them)"))
    return out


def check_two_procs(trace, ctx):
    """two processes under one --gpu, each launching its own marker kernel: no arrow joins a
    launch of one to a kernel of the other; each one's kernels on tracks of its own"""
    out = []
    procs = ctx["procs"]        # [{"pid": P, "marker": "sin_kernel", "launches": N}, ...]
    arrows = [(h, k) for h, k in _arrows(trace) if k.get("cat") == "kernel"]
    tracks = {}
    for p in procs:
        mine = [(h, k) for h, k in arrows if h["pid"] == p["pid"]]
        cross = [(h, k) for h, k in mine for q in procs
                 if q is not p and q["marker"] in k["name"]]
        own = [k for h, k in mine if p["marker"] in k["name"]]
        tracks[p["pid"]] = {(k["pid"], k["tid"]) for _, k in mine}
        out.append(("PASS" if not cross else "FAIL",
                    f"pid {p['pid']}: {len(cross)} arrows to the other process's kernels"))
        out.append(("PASS" if len(own) >= p["launches"] * JOIN_RATE_MIN else "FAIL",
                    f"pid {p['pid']}: {len(own)} of its {p['launches']} {p['marker']} launches "
                    f"joined to its own kernels"))
    a, b = (tracks[p["pid"]] for p in procs[:2])
    out.append(("PASS" if a and b and not a & b else "FAIL",
                f"GPU tracks per process: {sorted(a)[:3]} and {sorted(b)[:3]} share {len(a & b)}"))
    return out


def check_contexts(trace, ctx):
    """a second context (and a second device where there is one): its copies and memsets are
    joined, on tracks apart from the primary context's kernels"""
    out = []
    mono = _mono(trace)
    pid = ctx["pid"]
    w0, w1 = ctx["window"]
    arrows = [(h, g) for h, g in _arrows(trace) if h["pid"] == pid and w0 <= mono(h) <= w1]
    second = [(h, g) for h, g in arrows if g.get("cat") in ("gpu_memset", "gpu_memcpy")
              and g.get("args", {}).get("bytes") in (ctx["memset_bytes"], ctx["copy_bytes"])]
    prim = {(g["pid"], g["tid"]) for h, g in arrows if g.get("cat") == "kernel"}
    sec = {(g["pid"], g["tid"]) for _, g in second}
    names = {(e["pid"], e["tid"]): e.get("args", {}).get("name") for e in _events(trace)
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    out.append(("INFO", "second context's tracks: " +
                ", ".join(f"{t} {names.get(t)!r}" for t in sorted(sec)) +
                "; primary's: " + ", ".join(f"{t} {names.get(t)!r}" for t in sorted(prim))))
    kinds = collections.Counter(g["cat"] for _, g in second)
    out.append(("PASS" if kinds.get("gpu_memset") and kinds.get("gpu_memcpy") else "FAIL",
                f"the second context's memset and copy joined to their host calls ({dict(kinds)})"))
    out.append(("PASS" if sec and prim and not sec & prim else "FAIL",
                f"the second context's work on tracks apart from the primary's ({len(sec & prim)} shared)"))
    return out


REAL_CHECKS = {"threads": check_threads, "drops": check_drops, "clock": check_clock,
               "delivery": check_delivery, "early": check_early, "nccl": check_nccl,
               "procs": check_two_procs, "contexts": check_contexts}


def run_real(check, trace_path, ctx_path):
    with open(ctx_path) as f:
        ctx = json.load(f)
    trace = None if trace_path == "-" else load(trace_path)
    results = REAL_CHECKS[check](trace, ctx)
    for kind, msg in results:
        print(f"{kind} {check}: {msg}")
    return 1 if any(k == "FAIL" for k, _ in results) else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--real":
        if len(sys.argv) != 5 or sys.argv[2] not in REAL_CHECKS:
            sys.exit(f"validate.py: --real wants one of {', '.join(REAL_CHECKS)}, then "
                     f"OURS.json CONTEXT.json (got {' '.join(sys.argv[2:])!r})")
        sys.exit(run_real(sys.argv[2], sys.argv[3], sys.argv[4]))
    if len(sys.argv) != 5:
        sys.exit("usage: validate.py OURS.json KINETO.json PHASES.log STEPS\n"
                 f"       validate.py --real {{{','.join(REAL_CHECKS)}}} OURS.json CONTEXT.json")
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
