"""Multi-rank NCCL jobs on the simulated stack (tests/workloads/nccl_rank.c) for the flight
recorder tests: start N rank processes, attach `tptrace fr`, let them go, collect dumps."""
import glob
import json
import os
import shutil
import signal
import subprocess
import time
from lib import (ROOT, SIM_LIB, TPTRACE, WL, Tracer, Workload, ctxt_switches, fresh_tmp_path,
                 in_syscall, task_state, tmp_path, wait_until)

FR_TOOL = os.path.join(os.path.dirname(TPTRACE), "tptrace-fr")
PY_RANK = os.path.join(ROOT, "tests", "workloads", "py_nccl_rank.py")


class Job:
    def __init__(self, nranks, scenario="healthy", steps=3, culprit=1, extra=(), env=None,
                 name="job", python_rank=None):
        """python_rank=(R, interpreter): rank R is tests/workloads/py_nccl_rank.py under that
        interpreter (ctypes into the simulated libnccl; spins in Python after GO)"""
        self.dir = tmp_path(f"fr-{name}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.dump_dir = os.path.join(self.dir, "dumps")
        id_file = os.path.join(self.dir, "nccl.id")
        self.ranks = []
        for r in range(nranks):
            e = {"RANK": str(r), "WORLD_SIZE": str(nranks), "LOCAL_RANK": str(r)}
            if env:
                e.update(env)
            argv = [os.path.join(WL, "nccl_rank"), "--rank", str(r), "--nranks", str(nranks),
                    "--id-file", id_file, "--steps", str(steps), "--scenario", scenario,
                    "--culprit", str(culprit)] + list(extra)
            if python_rank and python_rank[0] == r:
                argv = [python_rank[1], PY_RANK, "--rank", str(r), "--nranks", str(nranks),
                        "--id-file", id_file, "--lib-dir", SIM_LIB]
            self.ranks.append(Workload(argv, env=e, wait_ready=False))
        # ranks rendezvous in ncclCommInitRank before READY: start all, then wait
        for w in self.ranks:
            w.wait_ready()
        self.tracer = None

    def pids(self):
        return [w.pid for w in self.ranks]

    def record(self, extra=(), env=None):
        args = ["fr", "--dump-dir", self.dump_dir]
        for p in self.pids():
            args += ["-p", str(p)]
        self.tracer = Tracer(args + list(extra), ready=False, env=env)
        line = self.tracer.err.wait_for(lambda l: "flight recorder on" in l, 120)
        assert line, self.tracer.err.text()

    def go(self):
        for w in self.ranks:
            w.go()

    def wait_done(self, ranks=None, timeout=60):
        for r in (ranks if ranks is not None else range(len(self.ranks))):
            self.ranks[r].wait_done(timeout)

    def run_clean(self, timeout=60):
        """Every rank goes, finishes its steps and exits 0; then the recorder, with all its
        targets gone, exits 0 too."""
        self.go()
        self.wait_done(timeout=timeout)
        for w in self.ranks:
            assert w.finish() == 0, w.out.text()
        assert self.tracer.wait(300) == 0, self.tracer.err.text()

    def kill(self):
        for w in self.ranks:
            w.kill()

    def stop(self):
        rc = self.tracer.stop()
        return rc

    def go_and_hang(self, culprit=None, culprit_line=None, timeout=30):
        """GO, then wait until every rank announced step 0 ("# step 0", --announce) and the
        culprit its fault line, and the others block on it (wait_hung): the job hangs before
        anyone attaches"""
        self.go()
        for w in self.ranks:
            assert w.out.wait_for(lambda l: l.startswith("# step 0"), timeout), w.out.text()
        if culprit_line:
            w = self.ranks[culprit]
            assert w.out.wait_for(lambda l: l.startswith(culprit_line), timeout), w.out.text()
        self.wait_hung(skip=[culprit] if culprit_line else [])
        for w in self.ranks:
            assert w.p.poll() is None, f"rank exited: {w.out.text()}"

    def wait_hung(self, skip=(), timeout=60):
        """Waits until every live rank but those in skip is blocked for good: its main thread
        asleep in a futex (a sync or a collective) and the sim's stream workers asleep, twice,
        with no wake-up of the main thread in between (its context switches unchanged). A rank
        still working has a runnable thread (R, however starved) or a main thread that wakes
        within a step; a rank hung on its peers matches and stays so."""
        def blocked():
            seen = {}
            for r, w in enumerate(self.ranks):
                if r in skip or w.p.poll() is not None:
                    continue
                if not in_syscall(w.pid, w.pid, "futex"):
                    return None
                for tid in os.listdir(f"/proc/{w.pid}/task"):
                    try:
                        with open(f"/proc/{w.pid}/task/{tid}/comm") as f:
                            comm = f.read().strip()
                    except OSError:
                        continue
                    if comm.startswith("tpsim-") and task_state(w.pid, tid) not in ("S", "D"):
                        return None
                seen[w.pid] = ctxt_switches(w.pid, w.pid)
            return seen

        def settled():
            a = blocked()
            if not a:
                return False
            time.sleep(0.2)     # the second look; a thread that wakes in it shows
            return a == blocked()
        wait_until(settled, timeout, "every rank blocked on its peers")

    def dump_now(self, n=None, timeout=120):
        """SIGUSR2 to the recorder; waits for the signal dumps of n processes"""
        want = n if n is not None else len(self.ranks)
        self.tracer.p.send_signal(signal.SIGUSR2)
        ok = self.tracer.err.wait_for(
            lambda l: sum(1 for x in self.tracer.err.lines if "(signal)" in x) >= want, timeout)
        assert ok, self.tracer.err.text()

    def dumps(self, pending=False):
        """this job's complete dumps by rank; pending: state-first files too (docs/fr-schema.md)"""
        out = {}
        for path in glob.glob(os.path.join(self.dump_dir, "tptrace-fr.*.json")):
            with open(path) as f:
                d = json.load(f)
            if d.get("stacks_pending") is True and not pending:
                continue        # a state-first file: the complete one replaces it
            out[d["global_rank"]] = d
        return out


def trace_ranks_gpu(job, name):
    """Every rank of job traced by its own `tptrace -p PID --gpu` from GO to its end: the
    traces' paths, rank order."""
    outs = [fresh_tmp_path(f"{name}-{r}.json") for r in range(len(job.ranks))]
    tracers = []
    try:
        for pid, out in zip(job.pids(), outs):
            tracers.append(Tracer(["-p", str(pid), "--gpu", "-o", out]))
        job.go()
        job.wait_done()
        for w in job.ranks:
            assert w.finish() == 0, w.out.text()
        for t in tracers:
            assert t.wait(300) == 0, t.err.text()
    finally:
        job.kill()
        for t in tracers:
            t.stop()
    return outs


def analyze(dump_dir):
    p = subprocess.run([FR_TOOL, "--json", dump_dir], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    try:
        return p.returncode, json.loads(p.stdout), p.stderr
    except json.JSONDecodeError:
        raise AssertionError(f"tptrace-fr output is not JSON: rc={p.returncode} {p.stdout!r} {p.stderr!r}")
