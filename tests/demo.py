#!/usr/bin/env python3
"""make demo: the product end to end on the simulated CUDA/NCCL stack, each step printed as the
one command a user would type.

  1. a training-shaped job (tests/workloads/sim_train.c) traced for 3 s with its GPU timeline:
     tptrace -p PID --gpu, then tptrace report of that trace (terminal, and an HTML page);
  2. a 4-rank NCCL job (tests/workloads/nccl_rank.c, scenario "idle": rank 2 stops calling NCCL
     and the others hang in their allreduce) under the flight recorder, started before the
     job's communicators (--init-after-go), tptrace fr, which dumps
     every rank once the job stalls; tptrace-fr names the rank;
  3. tptrace stacks on that hung job: where each rank is;
  4. tptrace mem --leaks on a job that leaks (tests/workloads/alloc_app.c, scenario "leak").

Every wait is on a handshake (READY lines, the recorder's "dumped" lines, DONE), never a sleep
standing in for one. Output goes to $DEMO_OUT (default out/). Exit 0 when every step showed what
it should; otherwise the step that failed is named and the exit status is 1.
"""
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("DEMO_OUT", "out")
BIN = os.path.join(ROOT, ".output", "tests")
TPTRACE = os.path.join(ROOT, "tptrace")
FR = os.path.join(ROOT, "tptrace-fr")
procs = []


class Proc:
    """A process whose stdout/stderr lines are collected as they come (a handshake reads them)."""

    def __init__(self, argv, env=None, stdin=True):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, **(env or {})), cwd=ROOT)
        self.lines, self.cv = [], threading.Condition()
        for s in (self.p.stdout, self.p.stderr):
            threading.Thread(target=self._read, args=(s,), daemon=True).start()
        procs.append(self)

    def _read(self, stream):
        for line in stream:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.lines.append(None)     # one per stream at its end
            self.cv.notify_all()

    def wait_for(self, pred, what, timeout=60, count=1):
        """the first count lines matching pred; fails the demo at the timeout (a hang guard)"""
        with self.cv:
            ok = self.cv.wait_for(lambda: len([l for l in self.lines if l and pred(l)]) >= count or
                                  self.lines.count(None) == 2, timeout)
            got = [l for l in self.lines if l and pred(l)]
        if len(got) < count:
            fail(f"{what}: not seen{'' if ok else f' within {timeout} s'}; it printed:\n" +
                 "\n".join(l for l in self.lines if l))
        return got[:count]

    def send(self, text):
        self.p.stdin.write(text)
        self.p.stdin.flush()

    def text(self):
        with self.cv:
            return "\n".join(l for l in self.lines if l is not None)

    def stop(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def cleanup():
    for p in reversed(procs):
        p.stop(signal.SIGINT if p.p.args[0] == TPTRACE else signal.SIGKILL)


def fail(msg):
    print(f"demo: FAILED: {msg}", flush=True)
    cleanup()
    sys.exit(1)


def say(cmd, why):
    print(f"\n$ {cmd}\n  ({why})", flush=True)


def run(argv, what, ok=(0,), show=True):
    p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
    if show:
        sys.stdout.write(p.stdout)
        sys.stdout.write(p.stderr)
    if p.returncode not in ok:
        fail(f"{what} exited {p.returncode}")
    return p


def rel(path):
    """as a user in the repository would type it"""
    r = os.path.relpath(os.path.abspath(path), ROOT)
    return os.path.abspath(path) if r.startswith("..") else r


def header(text):
    print("\n" + textwrap.fill(text, 100, subsequent_indent="   "), flush=True)


def gpu_trace():
    trace = os.path.join(OUT, "demo-trace.json.gz")
    html = os.path.join(OUT, "demo-report.html")
    job = Proc([os.path.join(BIN, "sim_train"), "--threads", "2", "--steps", "100000",
                "--kernel-us", "800"])
    ready = job.wait_for(lambda l: l.startswith("READY"), "sim_train READY")[0].split()
    pid = int(ready[1]) if len(ready) > 1 else job.p.pid
    job.send("GO\n")
    header("== 1. a training job (2 threads, GEMMs and ReLUs on two streams, copies, a sync a "
           f"step) runs as pid {pid}, on the simulated CUDA runtime and CUPTI; tptrace attaches "
           "to it as it runs")
    say(f"sudo tptrace -p {pid} --gpu -d 3 -o {rel(trace)}",
        "3 s of its CUDA calls, with the GPU timeline")
    p = subprocess.run([TPTRACE, "-p", str(pid), "--gpu", "-d", "3", "-o", trace],
                       capture_output=True, text=True, timeout=120)
    sys.stdout.write(p.stderr)
    if p.returncode != 0:
        print("  (--gpu refused, see above: tracing the CPU side only)")
        p = subprocess.run([TPTRACE, "-p", str(pid), "-d", "3", "-o", trace],
                           capture_output=True, text=True, timeout=120)
        sys.stdout.write(p.stderr)
    job.stop()
    if p.returncode != 0:
        fail("tptrace did not trace the job (see above)")
    t = json.load(gzip.open(trace, "rt"))
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")]
    flows = [e for e in t["traceEvents"] if e.get("ph") == "s" and e.get("cat") == "ac2g"]
    kernels = sorted({e["args"]["kernel"] for e in ev if "kernel" in e.get("args", {})})
    print(f"  kernels: {kernels}")
    print(f"  GPU timeline: {len(gpu)} GPU events on their stream tracks, {len(flows)} "
          "launch->kernel arrows")
    print(f"  open it: https://ui.perfetto.dev -> Open trace file -> {os.path.realpath(trace)}")
    if not gpu or not flows:
        fail("the trace has no GPU timeline (no GPU events or no launch->kernel arrows)")
    say(f"tptrace report {rel(trace)} -o {rel(html)}",
        "what to fix, from the trace: steps, GPU idle and why, findings")
    run([TPTRACE, "report", trace, "-o", html], "tptrace report")
    print(f"  the same with plots: {os.path.realpath(html)} (any browser)")


def hung_job():
    d = os.path.join(OUT, "demo-fr")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    dumps = os.path.join(d, "dumps")
    id_file = os.path.join(d, "nccl.id")
    ranks = []
    for r in range(4):
        ranks.append(Proc([os.path.join(BIN, "nccl_rank"), "--rank", str(r), "--nranks", "4",
                           "--id-file", id_file, "--steps", "3", "--scenario", "idle",
                           "--culprit", "2", "--init-after-go"],
                          env={"RANK": str(r), "WORLD_SIZE": "4", "LOCAL_RANK": str(r),
                               "TORCHELASTIC_RUN_ID": f"demo-{os.getpid()}"}))
    # READY, then (after GO) ncclCommInitRank under the recorder: the recorder, started
    # before the job's communicators as a fleet deployment runs it, knows their identities
    for r in ranks:
        r.wait_for(lambda l: l.startswith("READY"), "nccl_rank READY")
    pids = [r.p.pid for r in ranks]
    plist = " ".join(f"-p {p}" for p in pids)
    header("== 2. a 4-rank NCCL job (pids " + ", ".join(map(str, pids)) + ") under the "
           "flight recorder; rank 2 will stop calling NCCL and the others hang in their "
           "allreduce")
    say(f"sudo tptrace fr {plist} --dump-dir {rel(dumps)} --stall-timeout 3",
        "records every collective; dumps every rank once the job makes no progress for 3 s")
    rec = Proc([TPTRACE, "fr", "--dump-dir", dumps, "--stall-timeout", "3"] +
               [a for p in pids for a in ("-p", str(p))], stdin=False)
    rec.wait_for(lambda l: "flight recorder on" in l, "the recorder's start")
    for r in ranks:
        r.send("GO\n")
    ranks[2].wait_for(lambda l: l == "# culprit idle", "rank 2 going idle")
    got = rec.wait_for(lambda l: l.startswith("tptrace: dumped pid"), "the stall dumps",
                       timeout=90, count=4)
    for line in got:
        print("  " + line)
    say(f"tptrace-fr {rel(dumps)}", "which rank, communicator and collective the job is stuck on")
    p = run([FR, dumps], "tptrace-fr", ok=(1,))
    if "rank 2" not in p.stdout:
        fail("tptrace-fr did not name rank 2")
    header("== 3. the same hung job, seen from its stacks")
    say(f"sudo tptrace stacks {plist}",
        "each rank's threads, stopped a few ms: where they are, the odd one out")
    p = run([TPTRACE, "stacks"] + [a for q in pids for a in ("-p", str(q))], "tptrace stacks",
            show=False)
    # the summary part: the merged tree and the classes (the per-thread listing is long)
    out = p.stdout.splitlines()
    start = next((i for i, l in enumerate(out) if l.startswith("merged stacks")), 0)
    print("\n".join(out[start:]))
    if not any(l.startswith("outlier: rank 2") for l in out):
        fail("tptrace stacks did not single out rank 2")
    rec.stop(signal.SIGINT)
    for r in ranks:
        r.stop()


def leaks():
    job = Proc([os.path.join(BIN, "alloc_app"), "--scenario", "leak", "--hold"])
    job.wait_for(lambda l: l.startswith("READY"), "alloc_app READY")
    pid = job.p.pid
    header(f"== 4. a job (pid {pid}) that allocates GPU memory through PyTorch's caching "
           "allocator (simulated) and never frees some of it")
    say(f"sudo tptrace mem -p {pid} --leaks", "Ctrl-C: the allocations still live, by call site")
    mem = Proc([TPTRACE, "mem", "-p", str(pid), "--leaks"], stdin=False)
    mem.wait_for(lambda l: l.startswith("tptrace: tracing GPU memory"), "tptrace mem's start")
    job.send("GO\n")
    job.wait_for(lambda l: l == "DONE", "alloc_app DONE")
    mem.stop(signal.SIGINT)
    if mem.p.returncode != 0:
        fail(f"tptrace mem exited {mem.p.returncode}:\n{mem.text()}")
    text = mem.text()
    print("\n".join(l for l in text.splitlines() if not l.startswith("      #")))
    if "leak_site_b" not in text:
        fail("tptrace mem --leaks did not name the leaking call site")
    job.stop()


def main():
    os.makedirs(OUT, exist_ok=True)
    t0 = time.monotonic()
    try:
        gpu_trace()
        hung_job()
        leaks()
    finally:
        cleanup()
    print(f"\ndemo: done in {time.monotonic() - t0:.0f} s; outputs in {os.path.realpath(OUT)}")


if __name__ == "__main__":
    main()
