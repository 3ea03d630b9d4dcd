#!/usr/bin/env python3
"""What each additional `tptrace fr -a --scope netns` recorder costs on one kernel (issue 22
point 7; docs/benchmarks.md "Many recorders on one kernel").

Hosts are network namespaces (tpa<pid>-hK), each with P/H idle processes that have the real
libcudart and libnccl mapped (tests/bench/bench_loop, the recorders' targets) and, from step K,
its own recorder scoped to it. One more namespace (tpa<pid>-x) holds the measured process: a
bench_loop in no recorder's scope, calling ncclAllReduce / cudaStreamSynchronize in a loop.

The process "recorded" is one of host 0's, recorded by its recorder; its calls measured the same.

Recorders are started one after another (each once the previous one records its processes):
  attach_s[k]    start of recorder k -> its "flight recorder on" line (every in-scope process
                 found and recorded; the time its probes took is inside)
  ns_per_call    the measured process's ns per call with k recorders on the machine, none of
                 which records it (k = 0 first: the bare call)
  recorders      per recorder, its entry/return programs' runs per call and their run time
                 per call (kernel.bpf_stats_enabled, on only while counting: the timed calls
                 run without it): a program that runs on calls of a process out of its scope
                 costs that process its run time and the kernel's dispatch to it
Then stop_one_s (the last recorder alone, SIGINT -> exit; split into SIGINT -> its last final
dump line, and that line -> exit: the probes' removal) and stop_all_s (SIGINT to the others at
once -> all exited). One JSON object on stdout; progress on stderr. --extra=-p: each recorder
records its host's processes with -p PID instead (per-process links, what a scoped -a attaching
per process would cost). TPTRACE_BIN: another build's tptrace.

Usage: tests/bench/fleet_attach.py [--recorders 1,4,8] [--procs 16] [--calls 20000] [--reps 3]
Needs root, `make all test-bins` and tests/bench/bench_loop (`make -f tests/bench/bench.mk
.output/bench/bench_loop`). Waits are on the recorders' lines, bounded only to turn a hang
into a failure."""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402
from run import BENCH, REAL_CUDART, REAL_NCCL, Lines, bpftool_progs, tmp  # noqa: E402
from run import TPTRACE as BUILT  # noqa: E402

# TPTRACE_BIN: another build's tptrace (before/after a change)
TPTRACE = os.environ.get("TPTRACE_BIN") or BUILT
LOOP = os.path.join(BENCH, "bench_loop")
BOUND = 600
KNOB = "/proc/sys/kernel/bpf_stats_enabled"


def stats(on):
    with open(KNOB, "w") as f:
        f.write("1" if on else "0")


def log(msg):
    print(f"[fleet_attach {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class TLines(Lines):
    """Lines with each line's arrival time (time.monotonic) in .times."""

    def __init__(self, stream):
        self.times = []
        super().__init__(stream)

    def _run(self, stream):
        for line in stream:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.times.append(time.monotonic())
                self.cv.notify_all()
        with self.cv:
            self.closed = True
            self.cv.notify_all()


def sh(*argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {p.stderr.strip()}")


def Loop(ns, cpu=None):
    """bench_loop (run.py's Loop) in netns ns: RUN op calls -> ns per call."""
    return run.Loop(prefix=["ip", "netns", "exec", ns], cpu=cpu)


class Recorder:
    def __init__(self, ns, host, dump_dir, pids, extra=()):
        """pids: its host's processes; `-p` each of them instead of -a when extra has "-p"."""
        self.host = host
        nprocs = len(pids)
        who = ["-a", "--scope", "netns"]
        if "-p" in extra:
            extra = [x for x in extra if x != "-p"]
            who = [x for pid in pids for x in ("-p", str(pid))]
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(["ip", "netns", "exec", ns, TPTRACE, "fr", "-v"] + who +
                                  ["--host-id", host, "--dump-dir", dump_dir] + list(extra),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.err = TLines(self.p.stderr)
        line = self.err.wait_for(lambda l: "flight recorder on" in l, BOUND)
        self.attach_s = time.monotonic() - self.t0
        if not line:
            self.p.kill()
            raise RuntimeError(f"recorder {host} did not start: {self.err.text()[-600:]}")
        rec = sum(1 for x in self.err.lines if x.startswith("tptrace: recording pid"))
        if rec != nprocs:
            raise RuntimeError(f"recorder {host} records {rec} processes, not its {nprocs}: "
                               f"{self.err.text()[-600:]}")

    def progs(self):
        """{name: (run_cnt, run_time_ns)} of its uprobe programs."""
        out = {}
        for p in bpftool_progs(self.p.pid):
            if p.get("name", "").startswith("cuda_"):
                c, t = out.get(p["name"], (0, 0))
                out[p["name"]] = (c + p.get("run_cnt", 0), t + p.get("run_time_ns", 0))
        return out

    def stop(self):
        self.stop_t = time.monotonic()
        self.nlines = len(self.err.lines)
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)

    def wait(self):
        """Exit status checked; (SIGINT -> last final dump line, that line -> exit) in s."""
        try:
            rc = self.p.wait(BOUND)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        end = time.monotonic()
        if rc:
            raise RuntimeError(f"recorder {self.host} rc={rc}: {self.err.text()[-600:]}")
        self.err.wait_for(lambda l: False, 5)  # the pipe's end: every line read
        last = self.stop_t
        for line, t in zip(self.err.lines[self.nlines:], self.err.times[self.nlines:]):
            if line.startswith("tptrace: dumped pid"):
                last = t
        return round(last - self.stop_t, 2), round(end - last, 2)


def measure(loop, mine, recs, ops, calls, reps):
    """Out of every scope (loop) and in host 0's (mine, when there are recorders: "recorded")."""
    res = measure1(loop, recs, ops, calls, reps)
    res["recorded"] = measure1(mine, recs[:1], ops, calls, reps) if recs else {}
    return res


def measure1(loop, recs, ops, calls, reps):
    """Median ns per call of each op; the recorders' program runs and ns over those calls."""
    res = {}
    for op in ops:
        loop.run(op, calls // 10)  # warm
        # timed without the kernel's run statistics (they cost each run two clock reads),
        # then counted with them
        stats(False)
        ns = [loop.run(op, calls) for _ in range(reps)]
        stats(True)
        before = [r.progs() for r in recs]
        for _ in range(reps):
            loop.run(op, calls)
        after = [r.progs() for r in recs]
        stats(False)
        runs = []
        for b, a in zip(before, after):
            d = {k: (a[k][0] - b.get(k, (0, 0))[0], a[k][1] - b.get(k, (0, 0))[1]) for k in a}
            cnt = sum(c for c, _ in d.values())
            t = sum(t for _, t in d.values())
            runs.append({"runs_per_call": round(cnt / (calls * reps), 3),
                         "run_ns_per_call": round(t / (calls * reps), 1)})
        res[op] = {"ns_per_call": round(statistics.median(ns), 1), "recorders": runs}
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recorders", default="1,4,8")
    ap.add_argument("--procs", type=int, default=16, help="recorded processes, all hosts")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--extra", default="", help="more tptrace fr arguments; -p: each recorder "
                    "records its host's pids with -p instead of -a --scope netns (what per-process "
                    "links cost)")
    a = ap.parse_args()
    points = sorted({int(x) for x in a.recorders.split(",")})
    nrec = points[-1]
    if a.procs % nrec:
        sys.exit(f"--procs {a.procs} is not a multiple of {nrec} hosts")
    for path in (TPTRACE, LOOP):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} not built")
    tag = f"tpa{os.getpid()}"
    nss = [f"{tag}-h{k}" for k in range(nrec)] + [f"{tag}-x"]
    old_knob = open(KNOB).read().strip()
    procs, recs, loop, mine = [], [], None, None
    out = {"procs": a.procs, "hosts": nrec, "calls": a.calls, "reps": a.reps,
           "extra": a.extra, "attach_s": [], "points": {}}
    dump_dir = tmp(f"fleet-attach-{os.getpid()}")
    os.makedirs(dump_dir, exist_ok=True)
    try:
        for ns in nss:
            sh("ip", "netns", "add", ns)
        ncpu = os.cpu_count() or 1
        cpu = ncpu - 1 if ncpu > 1 else None
        loop = Loop(nss[-1], cpu=cpu)
        # the same calls in a process host 0's recorder records (one of its procs)
        mine = Loop(nss[0], cpu=cpu)
        procs.append(mine)
        for i in range(1, a.procs):
            procs.append(Loop(nss[i % nrec]))
        log(f"{a.procs} processes in {nrec} hosts, measured pid {loop.pid}")
        ops = [op for op in ("nccl", "sync") if op in loop.syms]
        out["points"]["0"] = measure(loop, mine, [], ops, a.calls, a.reps)
        log(f"0 recorders: {out['points']['0']}")
        for k in range(nrec):
            r = Recorder(nss[k], f"h{k}", dump_dir, [p.pid for p in procs[k::nrec]],
                         a.extra.split())
            recs.append(r)
            out["attach_s"].append(round(r.attach_s, 2))
            log(f"recorder {k + 1}: attached in {r.attach_s:.2f} s")
            if k + 1 in points:
                out["points"][str(k + 1)] = measure(loop, mine, recs, ops, a.calls, a.reps)
                log(f"{k + 1} recorders: {out['points'][str(k + 1)]}")
        t = time.monotonic()
        recs[-1].stop()
        out["stop_one_dumps_s"], out["stop_one_detach_s"] = recs[-1].wait()
        out["stop_one_s"] = round(time.monotonic() - t, 2)
        t = time.monotonic()
        for r in recs[:-1]:
            r.stop()
        split = [r.wait() for r in recs[:-1]]
        out["stop_all_s"] = round(time.monotonic() - t, 2)
        out["stop_all_split_s"] = split
        out["stop_all_n"] = len(recs) - 1
        recs = []
        log(f"stop: one {out['stop_one_s']} s, {out['stop_all_n']} at once {out['stop_all_s']} s")
    finally:
        for r in recs:
            if r.p.poll() is None:
                r.p.kill()
                r.p.wait()
        for p in procs + ([loop] if loop else []):
            p.close()
        with open(KNOB, "w") as f:
            f.write(old_knob)
        for ns in nss:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["rm", "-rf", dump_dir])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
