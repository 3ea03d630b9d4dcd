#!/usr/bin/env python3
"""tptrace overhead benchmarks (make bench). Prints one `key: value` line per figure on
stdout (`key: n/a (reason)` when a feature is missing at run time); progress goes to stderr.
Every figure is a median over repetitions measured in ONE run, configurations alternated, so
VM noise hits all of them alike. See docs/benchmarks.md for what each key means.

Usage: tests/bench/run.py [--reps N] [--calls N] [--only SECTION[,SECTION]] [--quick]
Sections: probe, ladder, bpfstats, pipeline, attach, analyzer, fr, frfoot, stacks, peers,
pystacks, report, torch, trigger"""
import argparse
import gzip
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, ".output")
BENCH = os.path.join(OUT, "bench")
TPTRACE = os.path.join(ROOT, "tptrace")
SIM_CUDART = os.path.join(OUT, "sim", "lib", "libcudart.so.13")
REAL_CUDART = "/usr/local/cuda/lib/libcudart.so.13"
REAL_NCCL = "/usr/local/cuda/lib/libnccl.so.2"
CACHE = os.environ.get("TPTRACE_BENCH_CACHE", "/tmp/tptrace-bench")
FUNCS = {"launch": "cudaLaunchKernel", "sync": "cudaStreamSynchronize",
         "alloc": "cudaMalloc", "nccl": "ncclAllReduce"}


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def emit(key, value):
    print(f"{key}: {value}", flush=True)


def na(key, why):
    emit(key, f"n/a ({why})")


def tmp(name):
    os.makedirs(BENCH, exist_ok=True)
    return os.path.join(BENCH, name)


class Lines:
    """Reads a pipe in a thread so the child never blocks on it."""

    def __init__(self, stream):
        self.lines, self.cv, self.closed = [], threading.Condition(), False
        threading.Thread(target=self._run, args=(stream,), daemon=True).start()

    def _run(self, stream):
        for line in stream:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.closed = True
            self.cv.notify_all()

    def wait_for(self, pred, timeout=30.0):
        end = time.monotonic() + timeout
        with self.cv:
            while True:
                for line in self.lines:
                    if pred(line):
                        return line
                left = end - time.monotonic()
                if left <= 0 or self.closed:
                    return None
                self.cv.wait(left)

    def text(self):
        with self.cv:
            return "\n".join(self.lines)


class Loop:
    """tests/bench/bench_loop.c: one long-lived process, RUN <op> <calls> -> ns per call."""

    def __init__(self, extra=(), prefix=(), cpu="last"):
        """prefix: a command the loop runs under (`ip netns exec NS`); cpu: the CPU it is
        pinned to, "last" (the tracers' readers get the others) or None (not pinned)"""
        argv = list(prefix) + [os.path.join(BENCH, "bench_loop"), "--cudart", REAL_CUDART]
        if os.path.exists(REAL_NCCL):
            argv += ["--nccl", REAL_NCCL]
        if cpu == "last" and (os.cpu_count() or 1) > 1:
            argv += ["--cpu", str(os.cpu_count() - 1)]  # tracers' readers get the other CPUs
        elif cpu not in (None, "last"):
            argv += ["--cpu", str(cpu)]
        self.p = subprocess.Popen(argv + list(extra), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.syms = {}
        while True:
            w = self.p.stdout.readline().split()
            if not w:
                raise RuntimeError("bench_loop died before READY")
            if w[0] == "READY":
                self.pid = int(w[1])
            elif w[0] == "SYM":
                self.syms[w[1]] = (w[2], w[3])
            elif w[0] == "END":
                break

    def run(self, op, calls):
        self.p.stdin.write(f"RUN {op} {calls}\n")
        self.p.stdin.flush()
        w = self.p.stdout.readline().split()
        if not w or w[0] != "NS":
            raise RuntimeError(f"bench_loop: RUN {op}: {' '.join(w)}")
        return float(w[2])

    def close(self):
        try:
            self.p.stdin.write("QUIT\n")
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


# The measured loop runs on CPU 1; every tracer's user-space reader runs on CPU 0, so on this
# 2-vCPU machine the reader's decoding does not preempt the loop and the figures are the cost
# of the probe itself (on a many-core host the reader never shares the job's CPU either).
TRACER_CPU = ["taskset", "-c", "0"] if shutil.which("taskset") and os.cpu_count() and os.cpu_count() > 1 else []


class Tptrace:
    def __init__(self, pid, out, extra=()):
        self.out = out
        if os.path.exists(out):
            os.unlink(out)
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(TRACER_CPU + [TPTRACE, "-p", str(pid), "-o", out] + list(extra),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.err = Lines(self.p.stderr)
        line = self.err.wait_for(lambda l: l.startswith("tptrace: tracing"), 60)
        self.ready_s = time.monotonic() - self.t0
        if not line:
            self.p.kill()
            self.p.wait()
            raise RuntimeError(f"tptrace did not start: {self.err.text()}")

    def close(self):
        self.p.send_signal(signal.SIGINT)
        try:
            rc = self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        if rc != 0:
            raise RuntimeError(f"tptrace rc={rc}: {self.err.text()}")


EMPTY_OBJ = os.path.join(BENCH, "bench_empty.bpf.o")


class EmptyProbe:
    """tests/bench/bench_probe.c: one program of a BPF object per function; by default the
    empty floor (bench_empty.bpf.c), for the ladder tptrace's own entry program."""

    def __init__(self, loop, ops, entry="empty_entry", ret=None, obj=EMPTY_OBJ, extra=()):
        self.ps, self.stats = [], {}
        for op, with_ret in ops:
            path, off = loop.syms[op]
            argv = [os.path.join(BENCH, "bench_probe"), "--obj", obj, "--pid", str(loop.pid),
                    "--path", path, "--off", off, "--entry", entry] + list(extra)
            if with_ret:
                argv += ["--return", ret or "empty_return"]
            p = subprocess.Popen(TRACER_CPU + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
            if p.stdout.readline().strip() != "ATTACHED":
                p.kill()
                raise RuntimeError(f"bench_probe {os.path.basename(obj)}:{entry} did not attach")
            self.ps.append(p)

    def close(self):
        for p in self.ps:
            out, _ = p.communicate(timeout=30)
            for line in out.splitlines():
                w = line.split()
                if w[0] == "STATS":
                    cnt, ns = self.stats.get(w[1], (0, 0))
                    self.stats[w[1]] = (cnt + int(w[2]), ns + int(w[3]))


class Bpftrace:
    """The same records with bpftrace: printf of the same fields (perf buffer to user space
    per event, like tptrace's ring), output to a file."""

    def __init__(self, loop, ops):
        progs = []
        for op, with_ret in ops:
            path, _ = loop.syms[op]
            fn = FUNCS[op]
            fields = 'tid, nsecs, arg0, arg1, arg2, arg3, arg4, arg5'
            fmt = '%d %llu %lx %lx %lx %lx %lx %lx'
            if op == "launch":  # tptrace copies [rsp] .. [rsp+16] and the caller's [rbp+8]
                fields += (', *(uint64*)(reg("sp")), *(uint64*)(reg("sp")+8), '
                           '*(uint64*)(reg("sp")+16), *(uint64*)(reg("bp")+8)')
                fmt += ' %lx %lx %lx %lx'
            progs.append(f'uprobe:{path}:{fn} {{ printf("{fmt}\\n", {fields}); }}')
            if with_ret:
                progs.append(f'uretprobe:{path}:{fn} {{ printf("%d %llu %d\\n", tid, nsecs, retval); }}')
        self.out = tmp("bpftrace.out")
        if os.path.exists(self.out):
            os.unlink(self.out)
        self.p = subprocess.Popen(TRACER_CPU + ["bpftrace", "-p", str(loop.pid), "-o", self.out, "-e",
                                   " ".join(progs)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        self.err = Lines(self.p.stderr)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if os.path.exists(self.out) and "Attaching" in open(self.out).read(4096):
                break
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        # "Attaching" is printed before the uprobes are armed (hundreds of ms on a busy VM):
        # wait until every op's calls show up in the output, else the measured calls would
        # run untraced
        for op, _ in ops:
            while self.p.poll() is None and time.monotonic() < end:
                size = os.path.getsize(self.out) if os.path.exists(self.out) else 0
                loop.run(op, 100)
                time.sleep(0.1)
                if os.path.exists(self.out) and os.path.getsize(self.out) > size:
                    break
        if self.p.poll() is None and time.monotonic() < end:
            return
        self.close()
        raise RuntimeError(f"bpftrace did not attach: {self.err.text()}")

    def close(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def load_trace(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def detect_ops(loop):
    """Which of the loop's functions tptrace probes, and whether it probes their returns too:
    attach once, call each, read the trace. The empty baseline then mirrors that probe set."""
    out = tmp("detect.json.gz")
    tr = Tptrace(loop.pid, out, ["--mem"])
    for op in loop.syms:
        loop.run(op, 200)
    tr.close()
    trace = load_trace(out)
    seen = {}
    for e in trace["traceEvents"]:
        # X: CUDA/NCCL calls; i: allocator calls (--mem), which carry rc when returns are probed
        if e.get("ph") == "X" or (e.get("ph") == "i" and e.get("cat") == "cuda_memory"):
            s = seen.setdefault(e["name"], [0, False])
            s[0] += 1
            s[1] |= "rc" in e.get("args", {})
    ops = {}
    for op, fn in FUNCS.items():
        if op in loop.syms and fn in seen and seen[fn][0] >= 200:
            ops[op] = seen[fn][1]
    return ops, seen


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def section_probe(a):
    loop = Loop()
    try:
        ops, seen = detect_ops(loop)
        for op in ("launch", "sync"):
            if op not in ops:
                raise RuntimeError(f"tptrace recorded no {FUNCS[op]} calls: {seen}")
        oplist = [(op, ops[op]) for op in FUNCS if op in ops]
        log(f"probe: ops {oplist} (op, return probe too); {a.reps} reps x {a.calls} calls")
        have_bt = shutil.which("bpftrace") is not None
        configs = ["none", "empty", "tptrace"] + (["bpftrace"] if have_bt else [])
        res = {c: {op: [] for op, _ in oplist} for c in configs}
        for rep in range(a.reps):
            order = configs[rep % len(configs):] + configs[:rep % len(configs)]
            for c in order:
                h = None
                if c == "empty":
                    h = EmptyProbe(loop, oplist)
                elif c == "tptrace":
                    h = Tptrace(loop.pid, tmp("probe.json.gz"), ["--mem"])
                elif c == "bpftrace":
                    h = Bpftrace(loop, oplist)
                loop.run("launch", a.warmup)  # lap the fresh ring once (see warmup)
                for op, _ in oplist:
                    loop.run(op, 500)  # settle after attach
                    res[c][op].append(loop.run(op, a.calls))
                if h:
                    h.close()
            log(f"probe: rep {rep + 1}/{a.reps} done")
        for op, with_ret in oplist:
            m = {c: med(res[c][op]) for c in configs}
            log(f"probe: {op} ns/call medians: " + ", ".join(f"{c} {m[c]:.0f}" for c in configs))
            emit(f"ns_per_call.{op}.none", f"{m['none']:.1f}")
            emit(f"ns_per_call.{op}.empty", f"{m['empty']:.0f}")
            emit(f"ns_per_call.{op}.tptrace", f"{m['tptrace']:.0f}")
            emit(f"probe_cost_ratio.{op}", f"{(m['tptrace'] - m['none']) / (m['empty'] - m['none']):.2f}")
            if have_bt:
                emit(f"ns_per_call.{op}.bpftrace", f"{m['bpftrace']:.0f}")
                emit(f"vs_bpftrace.{op}", f"{(m['tptrace'] - m['none']) / (m['bpftrace'] - m['none']):.2f}")
            else:
                na(f"vs_bpftrace.{op}", "bpftrace not installed")
        if "alloc" not in ops:
            na("probe_cost_ratio.alloc", f"tptrace --mem recorded no cudaMalloc calls: {sorted(seen)}")
        # `tptrace fr` -p and -a on NCCL; probe_cost_ratio.nccl is fr's where tptrace has none
        probe_nccl_fr(a, loop, main_key="nccl" not in ops)
        probe_launch_2threads(a, loop)
    finally:
        loop.close()


def probe_launch_2threads(a, loop):
    """Two threads launching at once on two CPUs: both write the one ring (its reservation
    takes a lock) and the same counters. Measured with tptrace's own entry program and cookie
    through bench_probe (the product's .output/cuda.bpf.o, tptrace's ring settings), whose
    reader only counts records: tptrace's reader would decode on the second loop thread's CPU
    of this 2-vCPU machine and measure itself, not the probe. 1 and 2 threads alternate under
    the same attach."""
    key = "probe_cost_ratio.launch_2threads"
    if (os.cpu_count() or 1) < 2:
        return na(key, "one CPU")
    configs = ["none", "empty", "tptrace"]
    res = {(c, n): [] for c in configs for n in (1, 2)}
    for rep in range(a.reps):
        for c in configs[rep % 3:] + configs[:rep % 3]:
            h = None
            if c == "empty":
                h = EmptyProbe(loop, [("launch", False)])
            elif c == "tptrace":
                h = ladder_probe(loop, "full")
            loop.run("launch", a.warmup)
            for n in ((1, 2) if rep % 2 == 0 else (2, 1)):
                op = "launch" if n == 1 else "launch_2threads"
                loop.run(op, 500)
                res[(c, n)].append(loop.run(op, a.calls))
            if h:
                h.close()
    m = {k: med(v) for k, v in res.items()}
    log("probe: launch 1/2 threads ns/call medians: " +
        ", ".join(f"{c}/{n} {m[(c, n)]:.0f}" for c, n in res))
    for c in configs:
        emit(f"ns_per_call.launch_2threads.{c}", f"{m[(c, 2)]:.0f}")
        emit(f"ns_per_call.launch_1thread_bpf.{c}", f"{m[(c, 1)]:.0f}")
    over = {(c, n): m[(c, n)] - m[("none", n)] for c in ("empty", "tptrace") for n in (1, 2)}
    # per call over the bare call: two threads at once against one thread alone
    emit(key, f"{over[('tptrace', 2)] / over[('tptrace', 1)]:.2f}")
    emit("probe_cost_ratio.launch_2threads.empty", f"{over[('empty', 2)] / over[('empty', 1)]:.2f}")
    # and against the empty probe with two threads, as probe_cost_ratio.launch
    emit("probe_cost_ratio.launch_2threads.vs_empty", f"{over[('tptrace', 2)] / over[('empty', 2)]:.2f}")
    emit("probe_cost_ratio.launch_1thread_bpf", f"{over[('tptrace', 1)] / over[('empty', 1)]:.2f}")


def probe_nccl_fr(a, loop, main_key=True):
    """NCCL calls are probed by `tptrace fr` (entry and return of every NCCL API), not by
    plain tptrace: ratio of fr's cost on ncclAllReduce to an empty uprobe+uretprobe."""
    key = "probe_cost_ratio.nccl"
    if "nccl" not in loop.syms:
        return na(key, f"{REAL_NCCL} not loadable")
    if run_cmd([TPTRACE, "fr", "--help"]).returncode != 0:
        return na(key, "neither tptrace nor `tptrace fr` probes NCCL in this build")
    # fr_all: `tptrace fr -a`, NCCL probed per file for every process behind the fr_pids filter
    res = {"none": [], "empty": [], "fr": [], "fr_all": []}
    # -a also watches every mmap on the host (a sys_exit hook): what it adds to any syscall
    sysc = {c: [] for c in res}
    for rep in range(a.reps):
        for c in list(res)[rep % 4:] + list(res)[:rep % 4]:
            h = None
            if c == "empty":
                h = EmptyProbe(loop, [("nccl", True)])
            elif c in ("fr", "fr_all"):
                who = ["-p", str(loop.pid)] if c == "fr" else ["-a"]
                fr = subprocess.Popen([TPTRACE, "fr"] + who + ["--dump-dir", tmp("fr-dumps")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                err = Lines(fr.stderr)
                if not err.wait_for(lambda l: l.startswith(f"tptrace: recording pid {loop.pid} "), 60):
                    fr.kill()
                    fr.wait()
                    return na(key, f"`tptrace fr` did not attach: {err.text()[:160]}")
            loop.run("nccl", 500)
            res[c].append(loop.run("nccl", a.calls))
            sysc[c].append(loop.run("syscall", a.calls))
            if h:
                h.close()
            elif c in ("fr", "fr_all"):
                fr.send_signal(signal.SIGINT)
                fr.wait(60)
    m = {c: med(v) for c, v in res.items()}
    log("probe: nccl (tptrace fr) ns/call medians: " + ", ".join(f"{c} {v:.0f}" for c, v in m.items()))
    emit("ns_per_call.nccl.fr", f"{m['fr']:.0f}")
    emit(key if main_key else f"{key}.fr", f"{(m['fr'] - m['none']) / (m['empty'] - m['none']):.2f}")
    emit("ns_per_call.nccl.fr_all", f"{m['fr_all']:.0f}")
    emit(f"{key}.fr_all", f"{(m['fr_all'] - m['none']) / (m['empty'] - m['none']):.2f}")
    # -a's per-file probes and pid filter against -p's per-process probes (1.00: the same)
    emit("fr_all_vs_fr.nccl", f"{(m['fr_all'] - m['none']) / (m['fr'] - m['none']):.2f}")
    # a getppid() in any process on the host while `tptrace fr -a` runs, to one without
    # (-p adds no syscall hook: its ratio is the noise floor)
    s = {c: med(v) for c, v in sysc.items()}
    log("probe: getppid ns/call medians: " + ", ".join(f"{c} {v:.0f}" for c, v in s.items()))
    emit("ns_per_syscall.none", f"{s['none']:.0f}")
    emit("syscall_cost_ratio.fr", f"{s['fr'] / s['none']:.2f}")
    emit("syscall_cost_ratio.fr_all", f"{s['fr_all'] / s['none']:.2f}")


# tptrace's entry program (bpf/cuda.bpf.c) on cudaLaunchKernel with the cookie tptrace gives it,
# cut short by bench.mk (TP_BENCH_STOP) or whole (the product's .output/cuda.bpf.o) under
# different wake-up settings: (key, object, bench_probe arguments)
PROD_OBJ = os.path.join(OUT, "cuda.bpf.o")
LAUNCH = ["--api", "cudaLaunchKernel"]
LADDER = [
    ("helpers_only", os.path.join(BENCH, "cuda_stop1.bpf.o"), LAUNCH),
    ("record_no_reads", os.path.join(BENCH, "cuda_stop2.bpf.o"), LAUNCH),
    ("full", PROD_OBJ, LAUNCH),
    ("full_caller2", PROD_OBJ, LAUNCH + ["--caller2"]),
    ("full_wake_every_record", PROD_OBJ, LAUNCH + ["--wake-bytes", "0"]),
    ("full_no_wakeup", PROD_OBJ, LAUNCH + ["--wake-bytes", str(1 << 62)]),
    # a reader that spends what tptrace's decoding does per record, on the other CPU
    ("full_busy_reader", PROD_OBJ, LAUNCH + ["--record-ns", "900"]),
]


def ladder_probe(loop, key):
    _, obj, extra = next(x for x in LADDER if x[0] == key)
    return EmptyProbe(loop, [("launch", False)], entry="cuda_entry", obj=obj, extra=extra)


def section_ladder(a):
    """Where the entry program's cost goes: tptrace's cudaLaunchKernel path cut step by step
    from bpf/cuda.bpf.c (see LADDER), each step's ns/call over the empty probe."""
    loop = Loop()
    try:
        configs = ["empty"] + [k for k, _, _ in LADDER]
        res = {c: [] for c in configs}
        for rep in range(max(3, a.reps - 2)):
            for c in configs[rep % len(configs):] + configs[:rep % len(configs)]:
                if c == "empty":
                    h = EmptyProbe(loop, [("launch", False)])
                else:
                    h = ladder_probe(loop, c)
                loop.run("launch", a.warmup)
                res[c].append(loop.run("launch", a.calls))
                h.close()
        base = med(res["empty"])
        for c in configs[1:]:
            emit(f"ladder.{c}_ns_over_empty", f"{med(res[c]) - base:.0f}")
    finally:
        loop.close()


def prog_ids(pid):
    """BPF program ids a process holds (its fds' fdinfo; bpftool 7.1 here lists no pids)."""
    ids = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return ids
    for fd in fds:
        try:
            for line in open(f"/proc/{pid}/fdinfo/{fd}"):
                if line.startswith("prog_id:"):
                    ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


def bpftool_progs(pid):
    """bpftool prog show entries of the programs process pid holds (run_cnt/run_time_ns
    present while kernel.bpf_stats_enabled=1)."""
    ids = prog_ids(pid)
    p = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True)
    progs = json.loads(p.stdout) if p.returncode == 0 else []
    return [x for x in progs if x.get("id") in ids]


def section_bpfstats(a):
    """Run time of tptrace's own programs as the kernel counts it (kernel.bpf_stats_enabled)."""
    knob = "/proc/sys/kernel/bpf_stats_enabled"
    try:
        old = open(knob).read().strip()
        open(knob, "w").write("1")
    except OSError as e:
        na("bpf_ns_per_run.entry", f"cannot enable {knob}: {e.strerror}")
        na("bpf_ns_per_run.return", f"cannot enable {knob}: {e.strerror}")
        return
    loop = Loop()
    try:
        tr = Tptrace(loop.pid, tmp("stats.json.gz"), os.environ.get("BENCH_TPTRACE_ARGS", "").split())
        loop.run("launch", a.calls)
        loop.run("sync", a.calls)
        progs = bpftool_progs(tr.p.pid)
        tr.close()
        for key, name in (("entry", "cuda_entry"), ("return", "cuda_return")):
            # cuda_entry_multi when the kernel has uprobe_multi (names are cut at 15 chars)
            p = next((p for p in progs if p.get("name", "").startswith(name[:15]) and
                      p.get("run_cnt")), None)
            if p:
                emit(f"bpf_ns_per_run.{key}", f"{p['run_time_ns'] / p['run_cnt']:.0f}")
            else:
                na(f"bpf_ns_per_run.{key}", f"no {name} program with runs in bpftool prog show")
        h = EmptyProbe(loop, [("launch", True)])
        loop.run("launch", a.calls)
        h.close()
        for name, key in (("empty_entry", "empty_entry"), ("empty_return", "empty_return")):
            if name in h.stats and h.stats[name][0]:
                cnt, ns = h.stats[name]
                emit(f"bpf_ns_per_run.{key}", f"{ns / cnt:.0f}")
        for key, _, _ in LADDER:
            h = ladder_probe(loop, key)
            loop.run("launch", a.calls)
            h.close()
            if h.stats.get("cuda_entry", (0, 0))[0]:
                cnt, ns = h.stats["cuda_entry"]
                emit(f"bpf_ns_per_run.ladder_{key}", f"{ns / cnt:.0f}")
            else:
                na(f"bpf_ns_per_run.ladder_{key}", "no runs counted")
    finally:
        loop.close()
        open(knob, "w").write(old)


def section_pipeline(a):
    steps = 20000 if a.quick else 100000
    p = subprocess.run([os.path.join(BENCH, "bench_pipeline"), "--cudart", SIM_CUDART,
                        "--steps", str(steps), "--reps", str(a.reps), "-o",
                        tmp("pipeline.json.gz")], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"bench_pipeline rc={p.returncode}: {p.stderr.strip()}")
    sys.stdout.write(p.stdout)
    sys.stdout.flush()
    fig = {"json_gz": dict(l.split(": ", 1) for l in p.stdout.splitlines() if ": " in l)}
    # the same records as plain JSON, and into Perfetto's protobuf format
    # (user/trace/trace_pftrace.c), plain and gzip: the two backends of the trace writer side by side
    for suffix, key in ((".json", "json"), (".pftrace", "pftrace"),
                        (".pftrace.gz", "pftrace_gz")):
        p = subprocess.run([os.path.join(BENCH, "bench_pipeline"), "--cudart", SIM_CUDART,
                            "--steps", str(steps), "--reps", str(a.reps), "-o",
                            tmp("pipeline" + suffix)], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"bench_pipeline {suffix} rc={p.returncode}: {p.stderr.strip()}")
        fig[key] = got = dict(l.split(": ", 1) for l in p.stdout.splitlines() if ": " in l)
        for k in ("pipeline_ns_per_event", "pipeline_events_per_s", "trace_bytes_per_event",
                  "pipeline_reader_cpu_ns_per_event"):
            emit(f"{k}.{key}", got[k])
    # .pftrace: what the calls' arguments take of its bytes (debug annotations and their
    # interned names and values), and what is left: the slices themselves (goal 24 for all)
    arg_bytes = float(fig["pftrace"]["trace_arg_bytes_per_event"])
    emit("trace_arg_bytes_per_event.pftrace", f"{arg_bytes:.1f}")
    emit("trace_bytes_per_event.pftrace_without_args",
         f"{float(fig['pftrace']['trace_bytes_per_event']) - arg_bytes:.1f}")
    # ratios: .pftrace against the JSON of the same records (bytes: plain to plain, gzip to
    # gzip; time: the reader thread's CPU, the part that must keep up with the rings)
    ratio = lambda a_, b_, k: f"{float(fig[a_][k]) / float(fig[b_][k]):.2f}"
    emit("pftrace_vs_json.bytes", ratio("pftrace", "json", "trace_bytes_per_event"))
    emit("pftrace_vs_json.bytes_gz", ratio("pftrace_gz", "json_gz", "trace_bytes_per_event"))
    emit("pftrace_vs_json.reader_cpu_ns",
         ratio("pftrace", "json", "pipeline_reader_cpu_ns_per_event"))
    emit("pftrace_vs_json.ns", ratio("pftrace", "json", "pipeline_ns_per_event"))
    # end to end: a sim job launching as fast as it can, tptrace for a few seconds
    wl = subprocess.Popen([os.path.join(OUT, "tests", "sim_train"), "--threads", "2", "--steps",
                           "100000000", "--kernel-us", "0"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        wlout = Lines(wl.stdout)
        line = wlout.wait_for(lambda l: l.startswith("READY"), 30)
        if not line:
            raise RuntimeError("sim_train never got READY")
        wl.stdin.write("GO\n")
        wl.stdin.flush()
        time.sleep(0.3)
        out = tmp("sustained.json.gz")
        secs = 2 if a.quick else 4
        rc = subprocess.run([TPTRACE, "-q", "-p", line.split()[1], "-d", str(secs), "-o", out],
                            timeout=120).returncode
        if rc != 0:
            raise RuntimeError(f"tptrace rc={rc}")
        meta = load_trace(out)["tptrace"]
        emit("sustained_events_per_s", f"{meta['calls'] / meta['duration_s']:.0f}")
        emit("sustained_records_per_s", f"{meta['events_recorded'] / meta['duration_s']:.0f}")
        emit("sustained_drops", meta["events_dropped"])
    finally:
        wl.kill()
        wl.wait()


def run_cmd(argv, timeout=None, cwd=None):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def gen_attach_libs(nsmall, big_mb, big_syms):
    """nsmall small .so files (a few symbols each, distinct build-ids) and one big .so of
    >= big_mb MB with big_syms function symbols (half exported, half hidden: .symtab only).
    Cached under $TPTRACE_BENCH_CACHE; a stamp names the parameters."""
    d = os.path.join(CACHE, f"attach-{nsmall}-{big_mb}-{big_syms}")
    stamp = os.path.join(d, "stamp")
    if os.path.exists(stamp):
        return d
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    t0 = time.monotonic()
    small_c = os.path.join(d, "small.c")
    with open(small_c, "w") as f:
        for i in range(8):
            f.write(f"int bench_small_fn{i}(int x) {{ return x * {i + 3} + {i}; }}\n")
    small_o = os.path.join(d, "small.o")
    r = run_cmd(["cc", "-O2", "-fPIC", "-c", small_c, "-o", small_o])
    if r.returncode:
        raise RuntimeError(r.stderr)
    libs = []
    for i in range(nsmall):
        so = os.path.join(d, f"libbenchsmall{i:03d}.so")
        r = run_cmd(["cc", "-shared", f"-Wl,--build-id=0x{i + 1:08x}{0xbe7c4:016x}",
                     f"-Wl,-soname,libbenchsmall{i:03d}.so", small_o, "-o", so])
        if r.returncode:
            raise RuntimeError(r.stderr)
        libs.append(so)
    # the big one: assembled from a generated .s (fast, unlike compiling C functions)
    big_s = os.path.join(d, "big.s")
    with open(big_s, "w") as f:
        f.write("\t.text\n")
        for i in range(big_syms):
            name = f"_ZN5bench5model5layer{i}7forwardERKNS_6TensorEPv"
            if i % 2:
                f.write(f"\t.hidden {name}\n")
            f.write(f"\t.globl {name}\n\t.type {name},@function\n{name}:\n\tret\n"
                    f"\t.size {name},1\n")
        f.write(f'\t.section .rodata.weights,"a",@progbits\n\t.zero {big_mb << 20}\n')
    big_o = os.path.join(d, "big.o")
    big_so = os.path.join(d, "libbenchbig.so")
    r = run_cmd(["as", big_s, "-o", big_o])
    if r.returncode:
        raise RuntimeError(r.stderr)
    r = run_cmd(["cc", "-shared", "-Wl,--build-id", big_o, "-o", big_so])
    if r.returncode:
        raise RuntimeError(r.stderr)
    os.unlink(big_o)
    os.unlink(big_s)
    libs.append(big_so)
    with open(os.path.join(d, "list"), "w") as f:
        f.write("\n".join(libs + [SIM_CUDART]) + "\n")
    open(stamp, "w").write("ok\n")
    log(f"attach: generated {nsmall} small libs + {os.path.getsize(big_so) >> 20} MB big lib "
        f"in {time.monotonic() - t0:.1f}s ({d})")
    return d


def section_attach(a):
    nsmall = 50 if a.quick else 200
    d = gen_attach_libs(nsmall, 64 if a.quick else 520, 50000 if a.quick else 400000)
    loop = Loop(["--dlopen-list", os.path.join(d, "list")])
    try:
        nlibs = sum(1 for l in open(f"/proc/{loop.pid}/maps") if ".so" in l and " r-xp " in l)
        times = []
        for _ in range(3 if a.quick else 5):
            tr = Tptrace(loop.pid, tmp("attach.json.gz"))
            times.append(tr.ready_s * 1000)
            tr.close()
        log(f"attach: {nlibs} mapped libraries, ready after " +
            ", ".join(f"{t:.0f}" for t in times) + " ms")
        emit("attach_ms", f"{med(times):.0f}")
        emit("attach_libs", nlibs)
    finally:
        loop.close()


def section_analyzer(a):
    gen = os.path.join(OUT, "tptrace-fr-gen")
    fr = os.path.join(ROOT, "tptrace-fr")
    ranks = int(os.environ.get("BENCH_FR_RANKS", 1024 if a.quick else 16384))
    entries = int(os.environ.get("BENCH_FR_ENTRIES", 2000))
    key = "analyzer_16k" if ranks == 16384 and entries == 2000 else f"analyzer_{ranks}x{entries}"
    for path, what in ((gen, "dump generator .output/tptrace-fr-gen"), (fr, "analyzer ./tptrace-fr")):
        if not os.access(path, os.X_OK):
            na(f"{key}_s", f"{what} not built")
            na(f"{key}_peak_mib", f"{what} not built")
            return
    d = os.path.join(CACHE, f"fr-{ranks}x{entries}")
    if not os.path.exists(os.path.join(d, "stamp")):
        shutil.rmtree(d, ignore_errors=True)
        t0 = time.monotonic()
        r = run_cmd([gen, "--ranks", str(ranks), "--entries", str(entries), "-o", d],
                    timeout=1800)
        if r.returncode:
            na(f"{key}_s", f"tptrace-fr-gen failed: {r.stderr.strip()[:200]}")
            na(f"{key}_peak_mib", "no dumps")
            return
        open(os.path.join(d, "stamp"), "w").write("ok\n")
        log(f"analyzer: generated {ranks} x {entries} dumps in {time.monotonic() - t0:.0f}s ({d})")
    # the default (over 1 GiB of dumps: the newest 256 entries of each), then every entry
    # (--tail all, what the default does below --full-read-max)
    for k, extra in ((key, []), (f"{key}_all", ["--tail", "all"])):
        walls, peaks = [], []
        for _ in range(1 if ranks > 4096 else 3):
            t0 = time.monotonic()
            p = subprocess.Popen([fr] + extra + [d], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
            _, status, ru = os.wait4(p.pid, 0)
            walls.append(time.monotonic() - t0)
            peaks.append(ru.ru_maxrss / 1024)
            rc = os.waitstatus_to_exitcode(status)
            if rc < 0 or rc > 3:
                na(f"{k}_s", f"tptrace-fr exited {rc}: {p.stderr.read().decode()[:200]}")
                na(f"{k}_peak_mib", "analyzer failed")
                break
        else:
            emit(f"{k}_s", f"{med(walls):.1f}")
            emit(f"{k}_peak_mib", f"{med(peaks):.0f}")


FR_RANKS = 8
FR_SHAPE = ["--kernels", "40", "--compute-us", "1000", "--poll-ms", "100"]


def fr_job(steps, nranks=FR_RANKS):
    """An 8-rank job on the simulated NCCL (tests/workloads/nccl_rank.c), shaped like a
    training step: 40 kernels of 1 ms (launched with cudaLaunchKernel), then allreduce,
    allgather, broadcast, a send/recv group, an event record the watchdog thread polls every
    100 ms like PyTorch's, and a stream sync."""
    idf = tmp("fr.id")
    if os.path.exists(idf):
        os.unlink(idf)
    ranks = []
    for r in range(nranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(nranks))
        wl = subprocess.Popen([os.path.join(OUT, "tests", "nccl_rank"), "--rank", str(r),
                               "--nranks", str(nranks), "--id-file", idf, "--steps", str(steps)]
                              + FR_SHAPE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env)
        ranks.append((wl, Lines(wl.stdout)))
    for wl, out in ranks:
        if not out.wait_for(lambda l: l.startswith("READY"), 60):
            for w, _ in ranks:
                w.kill()
                w.wait()
            raise RuntimeError("nccl_rank never got READY")
    return ranks


def section_fr(a):
    """Flight-recorder mode: step time of an 8-rank NCCL job with and without `tptrace fr -a`
    (alternating, median of reps), and BPF program runs (traps) per rank and step."""
    r = run_cmd([TPTRACE, "fr", "--help"])
    if r.returncode != 0:
        why = "`tptrace fr` not built: " + (r.stderr.strip().splitlines() or ["no output"])[0][:120]
        na("fr_overhead_pct", why)
        na("traps_per_step.fr", why)
        return
    if not os.access(os.path.join(OUT, "tests", "nccl_rank"), os.X_OK):
        na("fr_overhead_pct", "workload .output/tests/nccl_rank not built")
        na("traps_per_step.fr", "workload .output/tests/nccl_rank not built")
        return
    knob = "/proc/sys/kernel/bpf_stats_enabled"
    old = open(knob).read().strip()
    open(knob, "w").write("1")
    steps = 10 if a.quick else 40
    try:
        res = {"none": [], "fr": []}
        traps = []
        for rep in range(2 if a.quick else 5):
            for c in (("none", "fr") if rep % 2 == 0 else ("fr", "none")):
                ranks = fr_job(steps)
                fr = None
                if c == "fr":
                    fr = subprocess.Popen([TPTRACE, "fr", "-a", "--dump-dir", tmp("fr-dumps")],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True)
                    frerr = Lines(fr.stderr)
                    want = len(ranks)
                    if not frerr.wait_for(lambda l: sum(1 for x in frerr.lines
                                                        if x.startswith("tptrace: recording")) >= want, 60):
                        fr.kill()
                        for w, _ in ranks:
                            w.kill()
                        raise RuntimeError(f"`tptrace fr -a` did not pick up the ranks: {frerr.text()[:300]}")
                    before = sum(p.get("run_cnt", 0) for p in bpftool_progs(fr.pid))
                t0 = time.monotonic()
                for wl, _ in ranks:
                    wl.stdin.write("GO\n")
                    wl.stdin.flush()
                for wl, out in ranks:
                    if not out.wait_for(lambda l: l == "DONE", 600):
                        raise RuntimeError("nccl_rank did not finish")
                res[c].append((time.monotonic() - t0) / steps)
                if fr:
                    after = sum(p.get("run_cnt", 0) for p in bpftool_progs(fr.pid))
                    traps.append((after - before) / steps / len(ranks))
                    fr.send_signal(signal.SIGINT)
                    fr.wait(60)
                for wl, _ in ranks:
                    wl.stdin.close()
                    wl.wait(30)
        none, frm = med(res["none"]), med(res["fr"])
        log(f"fr: {FR_RANKS} ranks, step ms none {none * 1e3:.3f}, fr {frm * 1e3:.3f}")
        emit("fr_step_ms.none", f"{none * 1e3:.3f}")
        emit("fr_step_ms.fr", f"{frm * 1e3:.3f}")
        emit("fr_overhead_pct", f"{(frm / none - 1) * 100:.2f}")
        emit("traps_per_step.fr", f"{med(traps):.1f}")
        # the same traps at a bare-metal uprobe cost (0.2-1 us) instead of this VM's ~9 us
        emit("fr_overhead_pct.bare_metal_est",
             f"{med(traps) * 1e-6 / none * 100:.3f}")
    finally:
        open(knob, "w").write(old)


def stack_apps(n, threads):
    """n stack_app processes of `threads` threads each (main + parked + one spinning)."""
    apps = []
    for _ in range(n):
        p = subprocess.Popen([os.path.join(OUT, "tests", "stack_app"), "--threads",
                              str(threads - 2), "--spin"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        assert line.startswith("READY"), line
        apps.append(p)
    return apps


def section_stacks(a):
    """Hang snapshot (user/stacks/stacks.c through .output/e2e/stacks_dump): how long one sample
    keeps a 64-thread process stopped, and the wall time of a whole 8-process, 3-sample
    snapshot (processes in parallel, 200 ms between samples)."""
    dump = os.path.join(OUT, "e2e", "stacks_dump")
    reps = max(a.reps, 5)
    apps = stack_apps(1, 64)
    try:
        pid = str(apps[0].pid)
        # the first snapshot warms the page cache of the ELF files, as any earlier one would
        subprocess.run([dump, pid], stdout=subprocess.DEVNULL, check=True)
        stops = []
        for _ in range(reps):
            out = subprocess.run([dump, "--samples", "1", pid], stdout=subprocess.PIPE,
                                 check=True, text=True).stdout
            snap = json.loads(out)
            assert len(snap["threads"]) == 64, len(snap["threads"])
            stops.append(snap["stopped_ms_max"])
        log(f"stacks: 64-thread stop ms {sorted(stops)}")
        emit("stacks_stop_ms_64threads", f"{med(stops):.2f}")
        emit("stacks_stop_ms_64threads.max", f"{max(stops):.2f}")
    finally:
        for p in apps:
            p.kill()
            p.wait()
    apps = stack_apps(8, 8)
    try:
        pids = [str(p.pid) for p in apps]
        subprocess.run([dump] + pids, stdout=subprocess.DEVNULL, check=True)
        walls = []
        for _ in range(reps):
            t0 = time.monotonic()
            out = subprocess.run([dump, "--samples", "3"] + pids, stdout=subprocess.PIPE,
                                 check=True, text=True).stdout
            walls.append(time.monotonic() - t0)
            snaps = [json.loads(l) for l in out.splitlines()]
            assert len(snaps) == 8 and all(s["samples"] == 3 for s in snaps)
        log(f"stacks: 8 processes x 3 samples, s {sorted(walls)}")
        emit("stacks_8proc_3samples_s", f"{med(walls):.2f}")
        # the budget test_stacks_cli once asserted in wall time (2 s): its ratio, here only
        emit("stacks_8proc_3samples_budget_ratio", f"{med(walls) / 2.0:.2f}")
    finally:
        for p in apps:
            p.kill()
            p.wait()


def section_peers(a):
    """tptrace stacks beside py-spy and pystack on one hung Python process (py_peers.py,
    Debian's python3, 6 threads): wall time to a snapshot, and how long the target was
    stopped (the longest gap of a ticker thread in it that sleeps 0.2 ms at a time; the
    same without any tool is the floor). Tools alternated, one run."""
    venv_bin = os.path.expanduser("~/.cache/tptrace/venv/bin")
    if not os.path.exists(os.path.join(venv_bin, "py-spy")):
        for k in ("peers_snapshot_ms", "peers_stop_ms"):
            na(k, "no test venv: make deps")
        return
    env = dict(os.environ, PEERS_TICK="1")
    p = subprocess.Popen(["/usr/bin/python3", os.path.join(ROOT, "tests", "workloads",
                                                           "py_peers.py")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().startswith("READY")
        pid = str(p.pid)
        tools = {
            "tptrace": [TPTRACE, "stacks", "-p", pid, "--samples", "1"],
            "py-spy": [os.path.join(venv_bin, "py-spy"), "dump", "--native", "--pid", pid],
            "pystack": [os.path.join(venv_bin, "pystack"), "remote", pid],
            "none": None,
        }

        def gap(reset):
            p.stdin.write("reset\n" if reset else "get\n")
            p.stdin.flush()
            if not reset:
                line = p.stdout.readline().split()
                assert line[0] == "GAP", line
                return int(line[1]) / 1e6

        walls = {k: [] for k in tools}
        stops = {k: [] for k in tools}
        for name, argv in tools.items():  # warm every tool's file cache once
            if argv:
                subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        for _ in range(max(a.reps, 5)):
            for name, argv in tools.items():
                gap(True)
                t0 = time.monotonic()
                if argv:
                    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
                else:
                    time.sleep(0.3)
                walls[name].append((time.monotonic() - t0) * 1e3)
                time.sleep(0.05)  # the ticker notes the gap after the tool let go
                stops[name].append(gap(False))
        for name in ("tptrace", "py-spy", "pystack"):
            log(f"peers: {name} wall ms {sorted(round(x, 1) for x in walls[name])}, "
                f"stop ms {sorted(round(x, 2) for x in stops[name])}")
            key = name.replace("-", "")
            emit(f"peers_snapshot_ms.{key}", f"{med(walls[name]):.1f}")
            emit(f"peers_stop_ms.{key}", f"{med(stops[name]):.2f}")
        emit("peers_stop_ms.floor", f"{med(stops['none']):.2f}")
    finally:
        p.kill()
        p.wait()


# ---- the daemon's own footprint (frfoot) ----
FOOT_WINDOW_S = 8.0


def proc_usage(pid):
    """(utime+stime seconds of every thread, VmRSS MiB, VmHWM MiB) of pid."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    kb = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                kb[k] = int(v.split()[0])
    return ticks / os.sysconf("SC_CLK_TCK"), kb["VmRSS"] / 1024, kb["VmHWM"] / 1024


def foot_window(fr, seconds):
    """CPU of `tptrace fr` over a measured window, as % of one core (the same per hour)."""
    c0, _, _ = proc_usage(fr.pid)
    t0 = time.monotonic()
    time.sleep(seconds)
    c1, rss, hwm = proc_usage(fr.pid)
    return (c1 - c0) / (time.monotonic() - t0) * 100, rss, hwm


def start_recorder(which, dump_dir, n):
    """`tptrace fr` with `which` (-a, or -p PID...) once it records n processes (-a may
    record more: other NCCL processes of the host)."""
    fr = subprocess.Popen([TPTRACE, "fr"] + which + ["--dump-dir", dump_dir],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    frerr = Lines(fr.stderr)
    fr.frerr = frerr
    if not frerr.wait_for(lambda l: sum(1 for x in frerr.lines
                                        if x.startswith("tptrace: recording")) >= n, 120):
        stop_recorder(fr)
        raise RuntimeError(f"`tptrace fr {which[0]}` did not pick up {n} processes: "
                           f"{frerr.text()[:300]}")
    return fr


def stop_recorder(fr):
    if fr.poll() is None:
        fr.send_signal(signal.SIGINT)
        try:
            fr.wait(60)
        except subprocess.TimeoutExpired:
            fr.kill()
            fr.wait()


def section_frfoot(a):
    """The recorder as a daemon: `tptrace fr -a` recording N processes that have NCCL loaded and
    a communicator each (1-rank nccl_rank jobs). Idle: every process sits after its
    communicator init (before GO). Slow: after GO each runs one 1 s kernel then its
    collectives (a step every ~1 s, watchdog polling every 1 s). Per phase: CPU of the
    tptrace process over a window (utime+stime, all threads, as % of one core), VmRSS at
    the end of the window, VmHWM (peak since start). The same idle window with `-p PID...`
    (no /proc discovery) tells the recorder's own cost from the -a scan's."""
    wl_bin = os.path.join(OUT, "tests", "nccl_rank")
    keys = [f"fr_daemon_{k}_{n}" for n in (8, 64)
            for k in ("rss_mib", "hwm_mib", "cpu_pct", "rss_mib_slow", "cpu_pct_slow",
                      "rss_mib_p", "cpu_pct_p")]
    if not os.access(wl_bin, os.X_OK):
        for k in keys:
            na(k, "workload .output/tests/nccl_rank not built")
        return
    window = 5.0 if a.quick else FOOT_WINDOW_S
    for n in (8, 64):
        procs, fr = [], None
        iddir = tempfile.mkdtemp(prefix="frfoot.", dir=BENCH if os.path.isdir(BENCH) else None)
        try:
            for i in range(n):
                wl = subprocess.Popen([wl_bin, "--rank", "0", "--nranks", "1", "--id-file",
                                       os.path.join(iddir, f"id{i}"), "--steps", "1000000",
                                       "--kernels", "1", "--compute-us", "1000000",
                                       "--poll-ms", "1000"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True,
                                      env=dict(os.environ, RANK="0", WORLD_SIZE="1"))
                procs.append((wl, Lines(wl.stdout)))
            for wl, out in procs:
                if not out.wait_for(lambda l: l.startswith("READY"), 120):
                    raise RuntimeError("nccl_rank never got READY")
            # -p: the recorder's own cost per process, without the -a discovery
            plist = sum([["-p", str(wl.pid)] for wl, _ in procs], [])
            fr = start_recorder(plist, os.path.join(iddir, "dumps-p"), n)
            time.sleep(2.0)
            cpu, rss, hwm = foot_window(fr, window)
            log(f"frfoot: {n} idle -p: cpu {cpu:.3f} % rss {rss:.1f} MiB hwm {hwm:.1f} MiB")
            emit(f"fr_daemon_rss_mib_p_{n}", f"{rss:.1f}")
            emit(f"fr_daemon_cpu_pct_p_{n}", f"{cpu:.3f}")
            stop_recorder(fr)
            # -a: the daemon as deployed (the whole host's processes scanned)
            t0 = time.monotonic()
            fr = start_recorder(["-a"], os.path.join(iddir, "dumps"), n)
            log(f"frfoot: {n} processes recorded {time.monotonic() - t0:.1f}s after start")
            time.sleep(2.0)  # past the attach: steady state
            cpu, rss, hwm = foot_window(fr, window)
            log(f"frfoot: {n} idle: cpu {cpu:.3f} % rss {rss:.1f} MiB hwm {hwm:.1f} MiB")
            emit(f"fr_daemon_rss_mib_{n}", f"{rss:.1f}")
            emit(f"fr_daemon_hwm_mib_{n}", f"{hwm:.1f}")
            emit(f"fr_daemon_cpu_pct_{n}", f"{cpu:.3f}")
            for wl, _ in procs:
                wl.stdin.write("GO\n")
                wl.stdin.flush()
            time.sleep(2.0)
            cpu, rss, hwm = foot_window(fr, window)
            log(f"frfoot: {n} slow: cpu {cpu:.3f} % rss {rss:.1f} MiB hwm {hwm:.1f} MiB")
            emit(f"fr_daemon_rss_mib_slow_{n}", f"{rss:.1f}")
            emit(f"fr_daemon_cpu_pct_slow_{n}", f"{cpu:.3f}")
            if fr.poll() is not None:
                raise RuntimeError(f"`tptrace fr -a` exited ({fr.returncode}): "
                                   f"{fr.frerr.text()[:300]}")
        finally:
            if fr:
                stop_recorder(fr)
            for wl, _ in procs:
                wl.kill()
                wl.wait()
            shutil.rmtree(iddir, ignore_errors=True)


PY_STACKS = os.path.join(ROOT, "tests", "workloads", "py_stacks.py")
USTACK_DUMP = os.path.join(OUT, "e2e", "ustack_dump")


class PyLoop(Loop):
    """tests/workloads/py_stacks.py bench: cudaLaunchKernel of the real libcudart from a
    20-frame Python stack, RUN N -> ns per call (QUIT as Loop)."""

    def __init__(self, syms):
        cpu = ["taskset", "-c", str(os.cpu_count() - 1)] if TRACER_CPU else []
        self.p = subprocess.Popen(cpu + ["/usr/bin/python3", PY_STACKS, REAL_CUDART, "/dev/null",
                                         "bench"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        w = self.p.stdout.readline().split()
        if not w or w[0] != "READY":
            raise RuntimeError("py_stacks.py died before READY")
        self.pid = int(w[1])
        self.p.stdin.write("GO\n")
        self.p.stdin.flush()
        if self.p.stdout.readline().strip() != "BENCH":
            raise RuntimeError("py_stacks.py did not start its bench loop")
        self.syms = syms

    def run(self, op, calls):
        self.p.stdin.write(f"RUN {calls}\n")
        self.p.stdin.flush()
        w = self.p.stdout.readline().split()
        if not w or w[0] != "NS":
            raise RuntimeError(f"py_stacks.py: RUN: {' '.join(w)}")
        return float(w[1])


class UstackDump:
    """tests/e2e/ustack_dump.c --bench: tptrace's own BPF object and entry program on
    cudaLaunchKernel with --py-stacks capture (or without: --no-stacks), and user/core/ustack.c
    resolving every event's stack in the reader, as tptrace's sinks do."""

    def __init__(self, pid, stacks):
        argv = [USTACK_DUMP, str(pid), REAL_CUDART, "cudaLaunchKernel", "3600", "--bench"]
        if not stacks:
            argv.append("--no-stacks")
        self.p = subprocess.Popen(TRACER_CPU + argv, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.out = Lines(self.p.stdout)
        if not self.out.wait_for(lambda l: l == "READY", 60):
            self.p.kill()
            raise RuntimeError(f"ustack_dump did not attach: {self.p.stderr.read()}")
        self.summary = None

    def close(self):
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        last = self.out.wait_for(lambda l: l.startswith("{\"counters\""), 5)
        self.summary = json.loads(last) if last else None


def section_pystacks(a):
    """--py-stacks: a launch from a 20-frame Python stack, traced with stack capture, over the
    empty probe on the same function in the same run; and the user-space resolution cost."""
    if not os.path.exists(USTACK_DUMP):
        na("probe_cost_ratio.launch_pystack20", f"{USTACK_DUMP} not built (make test-bins)")
        return
    loop0 = Loop()
    syms = dict(loop0.syms)
    loop0.close()
    loop = PyLoop(syms)
    try:
        calls = a.calls
        configs = ["none", "empty", "nostacks", "stacks"]
        res = {c: [] for c in configs}
        resolve = []
        for rep in range(a.reps):
            for c in configs[rep % len(configs):] + configs[:rep % len(configs)]:
                h = None
                if c == "empty":
                    h = EmptyProbe(loop, [("launch", False)])
                elif c in ("nostacks", "stacks"):
                    h = UstackDump(loop.pid, c == "stacks")
                loop.run("launch", calls)  # settle after attach
                res[c].append(loop.run("launch", calls))
                if h:
                    h.close()
                    if c == "stacks" and isinstance(h, UstackDump) and h.summary:
                        resolve.append(h.summary["resolve_ns"])
            log(f"pystacks: rep {rep + 1}/{a.reps} done")
        m = {c: med(res[c]) for c in configs}
        for c in configs:
            emit(f"ns_per_call.pystack20.{c}", f"{m[c]:.0f}")
        base = m["empty"] - m["none"]
        emit("trap_ns.pystack20", f"{base:.0f}")
        emit("probe_cost_ratio.launch_pystack20", f"{(m['stacks'] - m['none']) / base:.2f}")
        emit("probe_cost_ratio.launch_pystack20_off", f"{(m['nostacks'] - m['none']) / base:.2f}")
        if resolve:
            emit("pystack_resolve_ns_per_event", f"{med(resolve):.0f}")
        else:
            na("pystack_resolve_ns_per_event", "ustack_dump printed no summary")
        pystack_bpf_ns(loop, calls)
    finally:
        loop.close()


def pystack_bpf_ns(loop, calls):
    """The entry program's own run time with and without stack capture (bpf_stats)."""
    knob = "/proc/sys/kernel/bpf_stats_enabled"
    try:
        old = open(knob).read().strip()
        open(knob, "w").write("1")
    except OSError as e:
        na("bpf_ns_per_run.entry_pystack20", f"cannot enable {knob}: {e.strerror}")
        return
    try:
        for stacks, key in ((False, "entry_pystack20_off"), (True, "entry_pystack20")):
            h = UstackDump(loop.pid, stacks)
            loop.run("launch", calls)
            p = next((p for p in bpftool_progs(h.p.pid) if p.get("name", "").startswith("cuda_entry")
                      and p.get("run_cnt")), None)
            h.close()
            if p:
                emit(f"bpf_ns_per_run.{key}", f"{p['run_time_ns'] / p['run_cnt']:.0f}")
            else:
                na(f"bpf_ns_per_run.{key}", "no cuda_entry program with runs")
    finally:
        open(knob, "w").write(old)


def gen_report_trace(path, events):
    """A trace in the exact shape tptrace --gpu writes (one event per line, metadata last):
    per step 100 launches, each its host call, its kernel and the ac2g arrow pair, then a
    cudaStreamSynchronize. Kernels of 5 us and 50 us alternate; the host is ahead."""
    per_step = 100 * 4 + 1
    steps = max(2, events // per_step)
    pid, tid = 4242, 4243
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write('{\n  "schemaVersion": 1,\n  "displayTimeUnit": "ms",\n'
                '  "baseTimeNanoseconds": 1700000000000000000,\n  "traceEvents": [\n')
        f.write('    {"ph":"M","name":"process_name","pid":%d,"tid":0,"args":{"name":"train"}}' % pid)
        t, gpu_t, corr = 1000.0, 1000.0, 1
        for s in range(steps):
            lines = []
            for k in range(100):
                dur = 5.0 if k % 2 else 50.0
                gpu_t = max(gpu_t, t + 5.0)
                lines.append('{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":%d,'
                             '"tid":%d,"ts":%.3f,"dur":2.000,"args":{"kernel":"gemm_%d",'
                             '"kernel source":"symbol","grid":[64,1,1],"block":[256,1,1],'
                             '"shared memory":0,"stream":7,"correlation":%d}}'
                             % (pid, tid, t, k % 8, corr))
                lines.append('{"ph":"s","cat":"ac2g","name":"ac2g","pid":%d,"tid":%d,"ts":%.3f,'
                             '"id":%d}' % (pid, tid, t, corr))
                lines.append('{"ph":"X","cat":"kernel","name":"gemm_%d","pid":0,"tid":7,'
                             '"ts":%.3f,"dur":%.3f,"args":{"device":0,"context":1,"stream":7,'
                             '"correlation":%d,"registers per thread":32,"shared memory":0,'
                             '"grid":[64,1,1],"block":[256,1,1]}}' % (k % 8, gpu_t, dur, corr))
                lines.append('{"ph":"f","cat":"ac2g","name":"ac2g","pid":0,"tid":7,"ts":%.3f,'
                             '"id":%d,"bp":"e"}' % (gpu_t, corr))
                gpu_t += dur + 1.0
                t += 3.0
                corr += 1
            lines.append('{"ph":"X","cat":"cuda_runtime","name":"cudaStreamSynchronize",'
                         '"pid":%d,"tid":%d,"ts":%.3f,"dur":%.3f,"args":{"stream":7,'
                         '"correlation":%d,"rc":0}}' % (pid, tid, t, gpu_t - t, corr))
            corr += 1
            t = gpu_t + 10.0
            f.write(",\n    " + ",\n    ".join(lines))
        f.write('\n  ],\n  "deviceProperties": [],\n  "tptrace": {"version": "bench", '
                '"base_mono_ns": 1000000000, "targets": [{"pid": %d, "comm": "train", '
                '"gpu": {"attached": true}}], "events_dropped": 0}\n}\n' % pid)
    return steps * per_step + 1, steps


def section_report(a):
    """tptrace report on a 1 M-event trace (.json.gz): wall time and peak RSS"""
    n = 100000 if a.quick else 1000000
    key = "report_1m_events" if n == 1000000 else f"report_{n // 1000}k_events"
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, f"report-{n}.json.gz")
    if not os.path.exists(path + ".stamp"):
        t0 = time.monotonic()
        events, steps = gen_report_trace(path + ".tmp", n)
        os.rename(path + ".tmp", path)
        open(path + ".stamp", "w").write(f"{events} {steps}\n")
        log(f"report: generated {events} events in {time.monotonic() - t0:.0f}s ({path})")
    events, steps = map(int, open(path + ".stamp").read().split())
    walls, peaks = [], []
    for _ in range(1 if a.quick else 3):
        out_path = tmp("report.json")
        with open(out_path, "w") as out, tempfile.TemporaryFile() as err:
            t0 = time.monotonic()
            p = subprocess.Popen([TPTRACE, "report", "--json", path], stdout=out, stderr=err)
            _, status, ru = os.wait4(p.pid, 0)
            walls.append(time.monotonic() - t0)
            peaks.append(ru.ru_maxrss / 1024)
            rc = os.waitstatus_to_exitcode(status)
            err.seek(0)
            if rc:
                na(f"{key}_s", f"tptrace report exited {rc}: {err.read().decode()[:200]}")
                na(f"{key}_rss_mib", "report failed")
                return
        with open(out_path) as f:
            r = json.load(f)
        got = len(r["steps"]["per_rank"][0]["steps"])
        if got != steps - 1:
            na(f"{key}_s", f"found {got} steps, want {steps - 1}")
            na(f"{key}_rss_mib", "report wrong")
            return
    emit(f"{key}_s", f"{med(walls):.2f}")
    emit(f"{key}_rss_mib", f"{max(peaks):.0f}")


def section_torch(a):
    """tptrace --torch: the cost of the window on tests/workloads/torch_train.py (Debian's
    python3 + python3-torch 1.13): step time of a traced copy inside the window over an
    untraced copy's steps at the same time"""
    py = "/usr/bin/python3"
    train = os.path.join(ROOT, "tests", "workloads", "torch_train.py")
    keys = ("torch_window_step_ratio", "torch_window_cpu_ratio", "torch_after_step_ratio",
            "torch_stop_pause_ms")
    if subprocess.run([py, "-c", "import torch"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode:
        for k in keys:
            na(k, "Debian's python3-torch is not installed")
        return
    # the untraced copy must still run when tptrace is gone: 1 s, attach, the 3 s window and
    # the stop snippet's pause (~8 s here) at ~2.8 ms a step
    steps = 6000
    wall, cpu, after, pause = [], [], [], []
    for rep in range(1 if a.quick else 3):
        times = [tmp(f"torch{i}.times") for i in range(2)]
        procs = [subprocess.Popen([py, train, str(steps), t, SIM_CUDART], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for t in times]
        try:
            for p in procs:
                p.stdout.readline()  # READY
            for p in procs:
                p.stdin.write("GO\n")
                p.stdin.flush()
            time.sleep(1)
            out = tmp("torch.json")
            r = subprocess.run([TPTRACE, "-p", str(procs[0].pid), "--torch", "-d", "3", "-o",
                                out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
            t_gone = time.monotonic_ns()
            for p in procs:
                p.communicate(timeout=300)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if r.returncode:
            for k in keys:
                na(k, f"tptrace --torch exited {r.returncode}: {r.stderr.strip()[:200]}")
            return
        with open(out) as f:
            w0, w1 = json.load(f)["tptrace"]["targets"][0]["torch"]["window_mono_ns"]
        rows = [[tuple(int(x) for x in line.split()) for line in open(t)] for t in times]
        end = min(rows[0][-1][0], rows[1][-1][0])

        def pick(rs, lo, hi, col):
            return [r[col] for r in rs if lo <= r[0] and r[0] + r[1] <= hi]

        wall.append(med(pick(rows[0], w0, w1, 1)) / med(pick(rows[1], w0, w1, 1)))
        cpu.append(med(pick(rows[0], w0, w1, 2)) / med(pick(rows[1], w0, w1, 2)))
        if not pick(rows[1], t_gone, end, 1):
            na("torch_after_step_ratio", "the untraced copy ended before tptrace did")
        else:
            after.append(med(pick(rows[0], t_gone, end, 1)) /
                         med(pick(rows[1], t_gone, end, 1)))
        pause.append(max(r[1] for r in rows[0]) / 1e6)
    emit("torch_window_step_ratio", f"{med(wall):.2f}")
    emit("torch_window_cpu_ratio", f"{med(cpu):.2f}")
    if after:
        emit("torch_after_step_ratio", f"{med(after):.2f}")
    emit("torch_stop_pause_ms", f"{med(pause):.0f}")


def section_trigger(a):
    """Cross-host dump trigger (docs/fr-schema.md "Triggers"): two `tptrace fr` recorders play
    two hosts of one 8-rank job (4 ranks each, one dump directory); a trigger file written by
    `tptrace fr --trigger` makes both dump every rank. Seconds from the trigger command's start
    to the last rank's dump line, median of reps, and its ratio to the 2 s the docs promise
    (test_fr_trigger asserts that they dump, once, for that trigger; the latency is here)."""
    if not os.access(os.path.join(OUT, "tests", "nccl_rank"), os.X_OK):
        na("fr_trigger_dump_s", "workload .output/tests/nccl_rank not built")
        return
    job_id = "bench-trigger"
    dump_dir = tmp("trigger-dumps")
    shutil.rmtree(dump_dir, ignore_errors=True)
    os.makedirs(dump_dir)
    old_env = os.environ.get("TORCHELASTIC_RUN_ID")
    os.environ["TORCHELASTIC_RUN_ID"] = job_id      # fr_job passes os.environ to the ranks
    try:
        ranks = fr_job(2)
    finally:
        if old_env is None:
            del os.environ["TORCHELASTIC_RUN_ID"]
        else:
            os.environ["TORCHELASTIC_RUN_ID"] = old_env
    recs = []
    try:
        for h, part in (("hostA", ranks[:FR_RANKS // 2]), ("hostB", ranks[FR_RANKS // 2:])):
            args = [TPTRACE, "fr", "--dump-dir", dump_dir, "--host-id", h, "--no-stacks"]
            for wl, _ in part:
                args += ["-p", str(wl.pid)]
            p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
            err = Lines(p.stderr)
            recs.append((p, err, len(part)))
            if not err.wait_for(lambda l: "flight recorder on" in l, 60):
                raise RuntimeError(f"`tptrace fr` did not start: {err.text()[:300]}")
        walls = []
        for _ in range(3 if a.quick else a.reps):
            t0 = time.monotonic()
            r = run_cmd([TPTRACE, "fr", "--trigger", dump_dir, "--job", job_id,
                         "--host-id", "bench"])
            tid = r.stdout.strip()
            if r.returncode or len(tid) != 32:
                raise RuntimeError(f"tptrace fr --trigger: {r.stderr.strip()[:200]}")
            for p, err, n in recs:
                if not err.wait_for(lambda l: sum(1 for x in err.lines if "dumped pid" in x and
                                                  f"(trigger {tid} " in x) >= n, 60):
                    raise RuntimeError(f"no dump for trigger {tid}: {err.text()[-300:]}")
            walls.append(time.monotonic() - t0)
        log(f"trigger: s {sorted(walls)}")
        emit("fr_trigger_dump_s", f"{med(walls):.3f}")
        emit("fr_trigger_dump_s.max", f"{max(walls):.3f}")
        emit("fr_trigger_dump_budget_ratio", f"{med(walls) / 2.0:.3f}")
    finally:
        for p, _, _ in recs:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for wl, _ in ranks:
            wl.kill()
            wl.wait()


SECTIONS = [("probe", section_probe), ("ladder", section_ladder), ("bpfstats", section_bpfstats),
            ("pipeline", section_pipeline), ("attach", section_attach),
            ("analyzer", section_analyzer), ("fr", section_fr), ("frfoot", section_frfoot),
            ("stacks", section_stacks), ("peers", section_peers), ("pystacks", section_pystacks),
            ("report", section_report), ("torch", section_torch),
            ("trigger", section_trigger)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--only", default="")
    ap.add_argument("--quick", action="store_true", help="fewer reps, smaller inputs")
    # A fresh ring's first lap can be slow in a VM (the host backs each page on first
    # touch: ~2x per call here); production rings lap within seconds, so measure after one
    # lap: tptrace's default 4 MiB / 112-byte launch records ~ 37k calls.
    ap.add_argument("--warmup", type=int, default=100000, help="calls after each attach")
    a = ap.parse_args()
    if a.quick:
        a.reps, a.calls, a.warmup = 3, 5000, 2000
    if os.geteuid() != 0:
        print("bench: needs root (BPF)", file=sys.stderr)
        return 1
    only = set(filter(None, a.only.split(",")))
    failed = 0
    for name, fn in SECTIONS:
        if only and name not in only:
            continue
        t0 = time.monotonic()
        try:
            fn(a)
        except Exception as e:  # one broken section must not hide the others' numbers
            failed += 1
            print(f"bench: section {name} failed: {e}", file=sys.stderr, flush=True)
        log(f"{name}: {time.monotonic() - t0:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
