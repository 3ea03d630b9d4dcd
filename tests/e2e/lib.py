"""Helpers for end-to-end tests: start a workload that waits at a handshake, attach tptrace
to it while it runs, let it go, stop the tracer, read the trace."""
import gzip
import json
import os
import shutil
import signal
import subprocess
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, ".output")
# TPTRACE_BIN: run the tests against another build of tptrace
TPTRACE = os.environ.get("TPTRACE_BIN") or os.path.join(ROOT, "tptrace")
WL = os.path.join(OUT, "tests")
SIM_LIB = os.path.join(OUT, "sim", "lib")
E2E_BIN = os.path.join(OUT, "e2e")
TMP = os.path.join(OUT, "tmp")
CUDA_LIB = "/usr/local/cuda/lib"


class Skip(Exception):
    pass


def python_for(path, tool):
    """An interpreter of the machine for a test that drives it with the test binary tool:
    the test is skipped (with the reason) where the interpreter is absent."""
    need_root()
    if not os.path.exists(tool):
        raise AssertionError(f"{tool} not built (make test)")
    if not os.access(path, os.X_OK):
        raise Skip(f"{path} absent (pyenv versions lists what this machine has)")
    return path


PYENV = "/root/.pyenv/versions"


def pyenv_python(minor):
    """The newest pyenv 3.<minor>.x interpreter; Skip saying so when there is none."""
    try:
        versions = [v for v in os.listdir(PYENV) if v.startswith(f"3.{minor}.")]
    except OSError:
        versions = []
    versions.sort(key=lambda v: [int(x) for x in v.split(".") if x.isdigit()])
    for v in reversed(versions):
        path = os.path.join(PYENV, v, "bin", "python3")
        if os.access(path, os.X_OK):
            return path
    raise Skip(f"no CPython 3.{minor} under {PYENV}")


VENV_SETUP = os.path.join(ROOT, "tests", "venv", "setup.sh")


def venv_python():
    """The test-only venv's interpreter (torch 2.x, HTA, py-spy, pystack: tests/venv/), made by
    make deps. Skip only where PyPI could not be reached when it ran; a venv that is simply
    absent is a failure (make deps was not run, or failed)."""
    venv = subprocess.run([VENV_SETUP, "--path"], stdout=subprocess.PIPE, text=True,
                          check=True).stdout.strip()
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(os.path.join(venv, ".tptrace-stamp")) and os.access(py, os.X_OK):
        return py
    try:
        with open(venv + ".unreachable") as f:
            raise Skip(f"no test venv: {f.read().strip()}")
    except FileNotFoundError:
        pass
    raise AssertionError(f"test venv {venv} absent or incomplete: run make deps")


def need_root():
    if os.geteuid() != 0:
        raise Skip("needs root for BPF")


def tmp_path(name):
    os.makedirs(TMP, exist_ok=True)
    return os.path.join(TMP, name)


def trace_dir(name, paths, file_name):
    """A fresh directory laid out as a trace client expects (HTA: rank{i}.pt.trace.json,
    TensorBoard's plugin: worker{i}.pt.trace.json): a copy of paths[i] named
    file_name.format(i=i)."""
    d = tmp_path(name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for i, p in enumerate(paths):
        shutil.copy(p, os.path.join(d, file_name.format(i=i)))
    return d


def fresh_tmp_path(name):
    """tmp_path(name) with no file of an earlier run left there."""
    path = tmp_path(name)
    if os.path.exists(path):
        os.unlink(path)
    return path


# x86_64 and aarch64 syscall numbers of the blocking calls tests wait for (/proc/TID/syscall)
SYSCALLS = {"x86_64": {"clock_nanosleep": 230, "nanosleep": 35, "read": 0, "futex": 202,
                       "wait4": 61, "pause": 34, "ppoll": 271, "poll": 7},
            "aarch64": {"clock_nanosleep": 115, "nanosleep": 101, "read": 63, "futex": 98,
                        "wait4": 260, "ppoll": 73, "pause": 73}}   # glibc's pause(): ppoll


def wait_until(pred, timeout=120.0, what="the condition"):
    """Waits for a state the test cannot be told about by a line or a pipe (/proc, a file):
    polls pred until it returns something true and returns that. The timeout is a failsafe,
    never the assertion's point: a test states what it waits for in what."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.01)


def task_state(pid, tid=None):
    """one letter (R, S, D, t, ...) of /proc/PID/task/TID/stat; None when it is gone"""
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def cpu_ticks(pid, tid=None):
    """user + system clock ticks a thread has run (/proc/.../stat); None if gone. Waiting for
    it to grow waits for work done, however slowly the machine runs it."""
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


def wait_cpu(pid, tid=None, ticks=2, timeout=120.0):
    """Waits until thread tid of pid has run ticks more clock ticks (10 ms each) than now"""
    t0 = cpu_ticks(pid, tid)
    wait_until(lambda: (cpu_ticks(pid, tid) or 0) >= t0 + ticks, timeout,
               f"thread {tid or pid} of pid {pid} to run {ticks} ticks")


def ctxt_switches(pid, tid=None):
    """voluntary + involuntary context switches of a thread (/proc/.../status); None if gone"""
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/status") as f:
            text = f.read()
    except OSError:
        return None
    return sum(int(l.split()[1]) for l in text.splitlines()
               if l.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")))


def in_syscall(pid, tid, name):
    """True while thread tid of pid is blocked (S/D) in syscall name (/proc/.../syscall)"""
    nr = SYSCALLS[os.uname().machine][name]
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/syscall") as f:
            words = f.read().split()
    except OSError:
        return False
    return bool(words) and words[0] == str(nr) and task_state(pid, tid) in ("S", "D")


def wait_in_syscall(pid, name, tid=None, timeout=120.0):
    """Waits until thread tid (default: any thread) of pid sleeps in syscall name; returns the tid"""
    def blocked():
        tids = [tid] if tid else [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        return next((t for t in tids if in_syscall(pid, t, name)), None)
    return wait_until(blocked, timeout, f"pid {pid} to block in {name}")


def thread_named(pid, comm):
    """tid of pid's first thread whose comm is comm; None when none is"""
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == comm:
                    return int(tid)
        except OSError:
            pass
    return None


def wait_blocked(pid, tid, name, also=lambda: True, timeout=120.0):
    """Waits until thread tid of pid sleeps in syscall name for good: seen there twice, with no
    wake-up in between (context switches unchanged), also() true both times. A thread that only
    passes through a short wait wakes within the second look (or shows R while starved)."""
    def look():
        if not (in_syscall(pid, tid, name) and also()):
            return None
        return ctxt_switches(pid, tid)

    def settled():
        a = look()
        if a is None:
            return False
        time.sleep(0.2)     # the second look
        return look() == a
    wait_until(settled, timeout, f"thread {tid} of pid {pid} to block in {name}")


# Every default timeout in this file is a failsafe for a wait on an event, sized for a machine at a
# load of 60 (tests/busy.sh beside other work): never the point of a test.
class Lines:
    """Collects a pipe's lines in a thread so neither side blocks."""

    def __init__(self, stream):
        self.lines = []
        self.cv = threading.Condition()
        self.closed = False
        self.t = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self.t.start()

    def _run(self, stream):
        for line in stream:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.closed = True
            self.cv.notify_all()

    def wait_for(self, pred, timeout=20.0):
        end = time.time() + timeout
        with self.cv:
            while True:
                for line in self.lines:
                    if pred(line):
                        return line
                left = end - time.time()
                if left <= 0 or self.closed:
                    return None
                self.cv.wait(left)

    def text(self):
        with self.cv:
            return "\n".join(self.lines)


class Workload:
    """A test program speaking the READY/GO/DONE handshake (tests/workloads/handshake.h)."""

    def __init__(self, argv, env=None, cwd=None, preexec_fn=None, wait_ready=True):
        e = dict(os.environ)
        if env:
            e.update(env)
        self.argv = argv
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=e, cwd=cwd,
                                  preexec_fn=preexec_fn)
        self.out = Lines(self.p.stdout)
        self.err = Lines(self.p.stderr)
        self.pid = self.p.pid
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout=120):
        line = self.out.wait_for(lambda l: l.startswith("READY"), timeout)
        if not line:
            self.kill()
            raise AssertionError(f"{self.argv[0]} never got READY: stdout={self.out.text()!r} "
                                 f"stderr={self.err.text()!r}")
        self.pid = int(line.split()[1]) if len(line.split()) > 1 else self.p.pid

    def go(self):
        self.p.stdin.write("GO\n")
        self.p.stdin.flush()

    def wait_done(self, timeout=300):
        line = self.out.wait_for(lambda l: l == "DONE", timeout)
        if not line:
            raise AssertionError(f"{self.argv[0]} did not finish: stdout={self.out.text()!r} "
                                 f"stderr={self.err.text()!r}")

    def finish(self, timeout=120):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        return self.p.wait(timeout)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


class Tracer:
    """tptrace running in the background until stop()."""

    def __init__(self, args, ready=True, timeout=120, env=None):
        self.args = [TPTRACE] + args
        e = dict(os.environ)
        if env:
            e.update(env)
        self.p = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=e)
        self.out = Lines(self.p.stdout)
        self.err = Lines(self.p.stderr)
        if ready:
            line = self.err.wait_for(lambda l: l.startswith("tptrace: tracing") or
                                     l.startswith("tptrace: waiting"), timeout)
            if not line:
                self.p.kill()
                self.p.wait()
                raise AssertionError(f"tptrace did not start: {self.err.text()}")

    def stop(self, sig=signal.SIGINT, timeout=300):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout=300):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError(f"tptrace did not exit: {self.err.text()}")
        self.out.t.join(5)
        self.err.t.join(5)
        return rc


def bpf_link_types(pid):
    """{link_type: count} of the BPF links a process holds open (its fdinfo), e.g.
    uprobe_multi for one link per library, perf for one uprobe per probe."""
    types = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = f.read()
        except OSError:
            continue
        for line in info.splitlines():
            if line.startswith("link_type:"):
                types[line.split()[1]] = types.get(line.split()[1], 0) + 1
    return types


def kernel_at_least(major, minor):
    release = os.uname().release.split("-")[0].split(".")
    return (int(release[0]), int(release[1])) >= (major, minor)


def run_tptrace(args, timeout=300):
    p = subprocess.run([TPTRACE] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def load_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def calls(trace, pid=None, name=None, cat="cuda_runtime"):
    """Host API events in file order (which is per-thread completion order)."""
    out = []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") != cat:
            continue
        if pid is not None and e["pid"] != pid:
            continue
        if name is not None and e["name"] != name:
            continue
        out.append(e)
    return out


def by_ts(events):
    return sorted(events, key=lambda e: (e["ts"], e["args"].get("correlation", 0)))


def counts(events):
    c = {}
    for e in events:
        c[e["name"]] = c.get(e["name"], 0) + 1
    return c


def trace_workload(argv, tracer_args=(), env=None, out_name="t.json", done_timeout=300,
                   tracer_env=None, after_go=None):
    """Start workload, attach, GO, wait DONE, let it exit, stop tracer; returns (trace, wl).
    after_go(wl, tr), when given, runs right after GO (a second handshake)."""
    out = fresh_tmp_path(out_name)
    wl = Workload(argv, env=env)
    try:
        tr = Tracer(["-p", str(wl.pid), "-o", out] + list(tracer_args), env=tracer_env)
        wl.go()
        if after_go:
            after_go(wl, tr)
        wl.wait_done(done_timeout)
        wl.finish()
        rc = tr.wait(300)  # ends by itself once the target exits
        assert rc == 0, f"tptrace rc={rc}: {tr.err.text()}"
    finally:
        wl.kill()
    return load_trace(out), wl, tr


def check_valid_trace(trace):
    """What Perfetto and HTA need of every event."""
    assert isinstance(trace.get("traceEvents"), list)
    for e in trace["traceEvents"]:
        for k in ("ph", "name", "pid", "tid"):
            assert k in e, f"event without {k}: {e}"
        if e["ph"] == "X":
            for k in ("ts", "dur", "cat"):
                assert k in e, f"X event without {k}: {e}"
            assert e["dur"] >= 0
            # python_function slices (--py-stacks) are the code around calls, as in Kineto
            if e["cat"] != "python_function":
                assert "correlation" in e["args"], e
    meta = trace["tptrace"]
    for k in ("version", "probes_attached", "events_recorded", "events_dropped"):
        assert k in meta, k



def text_lines(text, cols=100, step=8):
    """The logical lines of a human output that wraps at cols (tptrace stacks): a line that
    went past cols continues on the next ones, indented step more, each starting with the word
    that did not fit. Joined back, so a test matches what was said, not where it wrapped."""
    out = []        # [logical line so far, its indent, its last physical line's length]
    for l in text.splitlines():
        word = l.strip().split(" ", 1)[0] if l.strip() else ""
        if out and word:
            line, ind, last = out[-1]
            if l.startswith(" " * (ind + step)) and not l.startswith(" " * (ind + step + 1)) and \
                    last + 1 + len(word) > cols:
                out[-1] = [line + " " + l.strip(), ind, len(l)]
                continue
        out.append([l, len(l) - len(l.lstrip(" ")), len(l)])
    return [line for line, _, _ in out]
