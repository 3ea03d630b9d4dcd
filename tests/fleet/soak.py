#!/usr/bin/env python3
"""make soak: the fleet scenarios at scale (issue 22 point 7; docs/benchmarks.md "Fleet soak").

Default: 32 hosts x 8 ranks (256 rank processes, 32 recorders, one Prometheus) on this
machine; every fault scenario once with recorders started before, during and after the job's
start (a third of the hosts each), the straggler, then --healthy-runs healthy runs alternating
one recorder per host (mixed starts) and one recorder for the whole fleet. Prints one JSON
line per run and a summary; exit 1 when any run failed its checks (each says why).

Usage: tests/fleet/soak.py [--hosts 32] [--ranks 8] [--healthy-runs 100] [--stall-timeout 10]
                           [--healthy-triggers 1]
                           [--only missing,dead,mismatch,partition,straggler,healthy]
                           [--out FILE.jsonl] [--step-ms 200] [--poll-ms MS]
--poll-ms: the ranks' watchdog poll (default nccl_rank's 1 ms; PyTorch's is 100 ms). Each poll
is a probed call that every recorder on the kernel pays for: at 32 x 8 with 1 ms polls the
probes alone want ~4 cores of this 2-core machine (docs/benchmarks.md "Many recorders on one
kernel")."""
import argparse
import json
import os
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet as fleetlib  # noqa: E402
import scenarios  # noqa: E402

ALL = ["missing", "dead", "mismatch", "partition", "straggler", "healthy"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--ranks", type=int, default=8, help="ranks per host")
    ap.add_argument("--healthy-runs", type=int, default=100)
    ap.add_argument("--stall-timeout", type=int, default=10)
    ap.add_argument("--step-ms", type=int, default=200)
    ap.add_argument("--poll-ms", type=int, default=None)
    ap.add_argument("--healthy-triggers", type=int, default=1,
                    help="dump sets triggered in each healthy run before its final dumps")
    ap.add_argument("--only", default=",".join(ALL))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    only = a.only.split(",")
    bad = [x for x in only if x not in ALL]
    if bad or a.hosts < 2 or a.ranks < 1:
        ap.error(f"invalid --only {bad} or sizes")
    if os.geteuid() != 0:
        print("soak: needs root (namespaces, BPF)", file=sys.stderr)
        return 2
    # a timeout's SIGTERM unwinds like ^C: the fleet is torn down on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = open(a.out, "a") if a.out else None
    results = []
    t_start = time.time()
    with fleetlib.Fleet(a.hosts, a.ranks, name="soak", stall_timeout=a.stall_timeout,
                        prometheus=True, poll_ms=a.poll_ms) as f:
        runs = []
        part = a.hosts // 2
        culprit = a.ranks * (a.hosts - 1) + 1          # on the last host, not the root's
        for s in ["missing", "dead", "mismatch", "partition"]:
            if s in only:
                runs.append((s, lambda s=s: scenarios.run_fault(
                    f, s, culprit=culprit, part_host=part, when="mixed",
                    step_ms=a.step_ms)))
        if "straggler" in only:
            runs.append(("straggler", lambda: scenarios.run_straggler(
                f, culprit=culprit, step_ms=a.step_ms, when="mixed")))
        if "healthy" in only:
            for i in range(a.healthy_runs):
                runs.append(("healthy", lambda i=i: scenarios.run_healthy(
                    f, when="mixed", one_recorder=i % 2 == 1, step_ms=a.step_ms,
                    triggers=a.healthy_triggers)))
        for name, run in runs:
            t0 = time.time()
            try:
                r = run()
                r["ok"] = True
            except AssertionError as e:
                r = dict(f.last, ok=False, why=str(e)[:2000])
            except Exception:
                r = dict(f.last, ok=False, why=traceback.format_exc()[-2000:])
            f.last = {}
            r["wall_s"] = round(time.time() - t0, 1)
            results.append(r)
            line = json.dumps(r)
            print(line, flush=True)
            if out:
                out.write(line + "\n")
                out.flush()
    by = {}
    for r in results:
        k = r["scenario"]
        ok, n = by.get(k, (0, 0))
        by[k] = (ok + r["ok"], n + 1)
    sets = sum(r.get("dump_sets", 0) for r in results if r["scenario"] == "healthy")
    print(f"soak: {a.hosts} hosts x {a.ranks} ranks, {time.time() - t_start:.0f} s: " +
          ", ".join(f"{k} {ok}/{n} passed" for k, (ok, n) in by.items()) +
          (f" (healthy: {sets} dump sets judged)" if sets else ""), flush=True)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
