"""Helpers for the CUPTI agent tests (test_gpu.py): run .output/e2e/gpu_attach against a
workload, parse TPSIM_VERBOSE lines of the simulated runtime, read /proc/<pid>/maps."""
import json
import os
import re
import subprocess

from lib import E2E_BIN, OUT, Lines, Skip, load_trace, tmp_path

GPU_ATTACH = os.path.join(E2E_BIN, "gpu_attach")
AGENT_SO = os.path.join(OUT, "libtptrace_agent.so")

TPSIM_LINE = re.compile(r"tpsim: (\w+)(.*?) stream=(\d+) dev=(\d+) corr=(\d+) tid=(\d+) "
                        r"start=(\d+) end=(\d+)")


def need_ptrace():
    """Injection needs ptrace rights over the workload (our child)."""
    for f in (GPU_ATTACH, AGENT_SO):
        assert os.path.exists(f), f"{f} missing: run make test-bins"
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read())
    except OSError:
        scope = 0
    if scope == 3:
        raise Skip("ptrace_scope=3: no process may be ptraced on this host")
    if scope >= 1 and os.geteuid() != 0:
        raise Skip(f"ptrace_scope={scope} and not root: cannot inject into the workload")


class GpuAttach:
    """gpu_attach running until stop(); attached() waits for ATTACHED or its exit."""

    def __init__(self, pid, out_name, extra=(), env=None):
        self.out = tmp_path(out_name)
        if os.path.exists(self.out):
            os.unlink(self.out)
        e = dict(os.environ)
        if env:
            e.update(env)
        self.argv = [GPU_ATTACH, "-p", str(pid), "-o", self.out] + list(extra)
        self.p = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=e)
        self.stdout = Lines(self.p.stdout)
        self.stderr = Lines(self.p.stderr)

    def attached(self, timeout=30):
        line = self.stdout.wait_for(lambda l: l.startswith("ATTACHED"), timeout)
        return line is not None

    def stop(self, timeout=60):
        try:
            self.p.stdin.write("STOP\n")
            self.p.stdin.flush()
        except OSError:
            pass
        return self.wait(timeout)

    def wait(self, timeout=60):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError(f"gpu_attach hung: {self.stderr.text()}")
        self.stdout.t.join(5)
        self.stderr.t.join(5)
        return rc

    def stats(self):
        line = self.stdout.wait_for(lambda l: l.startswith("STATS "), 1)
        assert line, f"no STATS line: stdout={self.stdout.text()!r} stderr={self.stderr.text()!r}"
        return json.loads(line[len("STATS "):])

    def trace(self):
        return load_trace(self.out)


def tpsim_items(stderr_text):
    """Executed items reported by TPSIM_VERBOSE=1, as dicts keyed by correlation."""
    items = {}
    for line in stderr_text.splitlines():
        m = TPSIM_LINE.match(line)
        if not m:
            continue
        kind, what, stream, dev, corr, tid, start, end = m.groups()
        fields = dict(kv.split("=", 1) for kv in what.split())
        items[int(corr)] = {"kind": kind, "stream": int(stream), "dev": int(dev),
                            "tid": int(tid), "start": int(start), "end": int(end), **fields}
    return items


def maps_mention(pid, needle):
    with open(f"/proc/{pid}/maps") as f:
        return [l.rstrip("\n") for l in f if needle in l]


def agent_mapped(pid):
    """memfd copy (libtptrace_agent.so), /dev/shm copy (tptrace-agent-N.so) or resident."""
    return maps_mention(pid, "libtptrace_agent") + maps_mention(pid, "tptrace-agent-")


def gpu_events(trace, cat=None):
    return [e for e in trace["traceEvents"]
            if e.get("ph") == "X" and (cat is None or e.get("cat") == cat)]


def abs_ns(trace, ts_us):
    """Trace ts (µs from the trace base) back to CLOCK_MONOTONIC ns."""
    return trace["tptrace_gpu"]["base_mono_ns"] + round(ts_us * 1000)


def normalize_output(text):
    """Workload stdout without what differs between runs: pid, ASLR addresses."""
    text = re.sub(r"READY \d+", "READY <pid>", text)
    return re.sub(r"0x[0-9a-f]+", "0x?", text)
