#!/usr/bin/env python3
"""tptrace test runner (make test). Three tiers, see shared STYLE:
  unit:  .output/unit/test_* binaries and tests/tools/test_* scripts (no root needed)
  e2e:   tests/e2e/test_*.py functions, as root with real BPF
  smoke: tests/e2e/test_cli.py (help, version, bad input), test_demo.py, test_install.py,
         test_runner.py, test_gpu_check.py (tests/gpu/check.sh without a GPU)
Prints one line per test and ends with 'N passed, N failed' (skips counted on the line before).
Usage: tests/run.py [--tier unit|e2e|smoke[,...]]... [-k SUBSTRING]... [-x] [--list]
  --tier   run only these tiers (repeatable or a comma list; default: all)
  -k       run only tests whose printed name contains SUBSTRING (repeatable: any of them),
           e.g. unit/test_decode, tools/test_fr.py, test_cli.test_help_and_version
  -x       stop at the first failure
  --list   print the selected names, run nothing
A selection that matches no test is an error (exit 2), never '0 passed, 0 failed'."""
import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

TIERS = ("unit", "e2e", "smoke")
# tests/e2e modules that are smoke tests (fast checks of the command-line surface); every
# other tests/e2e/test_*.py is e2e
SMOKE_MODULES = {"test_cli", "test_demo", "test_install", "test_runner", "test_gpu_check"}

results = {"passed": 0, "failed": 0, "skipped": 0}
failures = []


class Skip(Exception):
    pass


class Test:
    """One runnable test: name as printed, its tier, and how to run it."""

    def __init__(self, name, tier, run):
        self.name, self.tier, self.run = name, tier, run


def report(name, status, secs, why=""):
    results[status] += 1
    tag = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[status]
    line = f"{tag} {name} ({secs:.1f}s)"
    if why:
        line += f": {why}"
    print(line, flush=True)
    if status == "failed":
        failures.append(name)


def run_exe(name, argv, timeout=300):
    t0 = time.time()
    try:
        p = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, text=True, errors="replace")
    except subprocess.TimeoutExpired:
        report(name, "failed", time.time() - t0, f"timed out after {timeout}s")
        return
    if p.returncode == 0:
        report(name, "passed", time.time() - t0)
    elif p.returncode == 77:
        report(name, "skipped", time.time() - t0, p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "")
    else:
        tail = "\n".join(p.stdout.strip().splitlines()[-15:])
        report(name, "failed", time.time() - t0, f"exit {p.returncode}\n{tail}")


# An e2e test that runs past this is stopped and failed (the slowest takes about 60 s on a
# loaded 2-core machine): a hang says where it was and the run goes on to its last line.
TEST_LIMIT_S = int(os.environ.get("TPTRACE_TEST_LIMIT_S", "600"))
# after the limit, the test's own cleanup gets this long each time before it is interrupted
# again, at most CLEANUP_TRIES times
CLEANUP_S, CLEANUP_TRIES = 60, 5


class TestTimeout(BaseException):
    """Raised in a test past its limit; a BaseException so that no `except Exception` in a
    test's retry loop swallows it, while its `finally` and `except BaseException` cleanups
    still run."""


def descendants(root_pid):
    """pids whose parent chain reaches root_pid, parents first."""
    parent = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        parent[int(d)] = int(st[st.rindex(")") + 2:].split()[1])
    out, todo = [], [root_pid]
    while todo:
        p = todo.pop(0)
        kids = sorted(c for c, pp in parent.items() if pp == p)
        out += kids
        todo += kids
    return out


def proc_line(path):
    """'comm state wchan tracer=N' of one /proc task, or why it could not be read."""
    def read(name):
        try:
            with open(f"{path}/{name}") as f:
                return f.read()
        except OSError as e:
            return f"<{e.strerror}>"
    st = read("stat")
    comm = st[st.find("(") + 1:st.rfind(")")] if ")" in st else st
    state = st[st.rfind(")") + 2:st.rfind(")") + 3] if ")" in st else "?"
    tracer = [l.split()[1] for l in read("status").splitlines() if l.startswith("TracerPid:")]
    return f"{comm} {state} wchan={read('wchan').strip() or '-'} tracer={tracer[0] if tracer else '?'}"


def hang_report(frame):
    """Where the test was (its Python stack) and what each process it started was doing:
    state, kernel wait channel, tracer and kernel stack of every thread not running."""
    lines = ["test stack (innermost last):"]
    lines += ["  " + l.rstrip() for l in traceback.format_stack(frame)[-8:]]
    for pid in descendants(os.getpid())[:40]:
        lines.append(f"process {pid}: {proc_line(f'/proc/{pid}')}")
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
        for tid in tids[:16]:
            line = proc_line(f"/proc/{pid}/task/{tid}")
            if " R " in f" {line} ":
                continue
            lines.append(f"  thread {tid}: {line}")
            try:
                with open(f"/proc/{pid}/task/{tid}/stack") as f:
                    lines += ["    " + l.rstrip() for l in f.read().splitlines()[:8]]
            except OSError:
                pass
    return "\n".join(lines)


def run_fn(name, fn):
    t0 = time.time()
    fired = {"n": 0, "report": ""}

    def on_alarm(signum, frame):
        fired["n"] += 1
        if fired["n"] == 1:
            try:
                fired["report"] = hang_report(frame)
            except Exception:
                fired["report"] = traceback.format_exc(limit=2)
        if fired["n"] > CLEANUP_TRIES:
            # its cleanup is stuck for good: said, and the run ends with its last line
            report(name, "failed", time.time() - t0,
                   f"still running {TEST_LIMIT_S} s + {CLEANUP_TRIES} x {CLEANUP_S} s after it "
                   f"started, in its cleanup; the run stops here\n{fired['report']}")
            finish()
            os._exit(1)
        signal.alarm(CLEANUP_S)
        raise TestTimeout(f"past its {TEST_LIMIT_S} s limit")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TEST_LIMIT_S)
    try:
        try:
            fn()
        finally:
            signal.alarm(0)
        report(name, "passed", time.time() - t0)
    except Skip as e:
        report(name, "skipped", time.time() - t0, str(e))
    except TestTimeout as e:
        report(name, "failed", time.time() - t0, f"stopped {e}\n{fired['report']}")
    except Exception as e:
        if fired["n"]:
            report(name, "failed", time.time() - t0, f"stopped past its {TEST_LIMIT_S} s limit "
                   f"(its cleanup raised {type(e).__name__})\n{fired['report']}")
        elif type(e).__name__ == "Skip":  # lib.Skip and friends
            report(name, "skipped", time.time() - t0, str(e))
        else:
            report(name, "failed", time.time() - t0, traceback.format_exc(limit=4).strip())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def module_tier(module):
    return "smoke" if module in SMOKE_MODULES else "e2e"


def discover(tiers, root=ROOT):
    """Every test of the given tiers, in run order. Python modules are imported only when
    their tier is wanted; one that fails to import is a failing test named e2e/<file>."""
    tests = []
    if "unit" in tiers:
        unit_dir = os.path.join(root, ".output", "unit")
        if os.path.isdir(unit_dir):
            for f in sorted(os.listdir(unit_dir)):
                path = os.path.join(unit_dir, f)
                if f.startswith("test_") and os.access(path, os.X_OK) and os.path.isfile(path):
                    tests.append(Test(f"unit/{f}", "unit", lambda n=f"unit/{f}", p=path: run_exe(n, [p])))
        tools_dir = os.path.join(root, "tests", "tools")
        if os.path.isdir(tools_dir):
            for f in sorted(os.listdir(tools_dir)):
                path = os.path.join(tools_dir, f)
                if f.startswith("test_") and os.access(path, os.X_OK) and os.path.isfile(path):
                    tests.append(Test(f"tools/{f}", "unit",
                                      lambda n=f"tools/{f}", p=path: run_exe(n, [p], timeout=600)))
    e2e_dir = os.path.join(root, "tests", "e2e")
    for f in sorted(os.listdir(e2e_dir)):
        if not (f.startswith("test_") and f.endswith(".py")):
            continue
        tier = module_tier(f[:-3])
        if tier not in tiers:
            continue
        spec = importlib.util.spec_from_file_location(f[:-3], os.path.join(e2e_dir, f))
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except Exception:
            why = traceback.format_exc(limit=3)
            tests.append(Test(f"e2e/{f}", tier,
                              lambda n=f"e2e/{f}", w=why: report(n, "failed", 0, w)))
            continue
        for name in sorted(n for n in dir(mod) if n.startswith("test_") and callable(getattr(mod, n))):
            full = f"{f[:-3]}.{name}"
            tests.append(Test(full, tier, lambda n=full, fn=getattr(mod, name): run_fn(n, fn)))
    return tests


def parse_tiers(values):
    """['unit', 'e2e,smoke'] -> {'unit', 'e2e', 'smoke'}; none given -> every tier."""
    tiers = set()
    for v in values or []:
        for t in filter(None, (x.strip() for x in v.split(","))):
            if t not in TIERS:
                raise ValueError(f"unknown tier {t!r} (tiers: {', '.join(TIERS)})")
            tiers.add(t)
    return tiers or set(TIERS)


def select(tests, patterns):
    """Tests whose printed name contains any of the patterns (all when there are none)."""
    if not patterns:
        return list(tests)
    return [t for t in tests if any(p in t.name for p in patterns)]


def nothing_matched(tiers, patterns):
    tier_s = ",".join(t for t in TIERS if t in tiers)
    if patterns:
        ks = " ".join(f"-k {p!r}" for p in patterns)
        return f"run.py: no test matches {ks} in tier {tier_s} (--list shows the names)"
    return f"run.py: no tests found in tier {tier_s} (built? `make test-bins` builds them)"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tests/run.py", usage=__doc__.split("Usage: ")[1].split("\n")[0])
    ap.add_argument("--tier", action="append", default=[])
    ap.add_argument("-k", dest="patterns", action="append", default=[])
    ap.add_argument("-x", dest="stop_first", action="store_true")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    try:
        tiers = parse_tiers(a.tier)
    except ValueError as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2
    tests = select(discover(tiers), a.patterns)
    if not tests:
        print(nothing_matched(tiers, a.patterns), file=sys.stderr)
        return 2
    if a.list:
        for t in tests:
            print(f"{t.tier:5} {t.name}")
        return 0
    for t in tests:
        t.run()
        if a.stop_first and failures:
            break
    return finish()


def finish():
    if failures:
        print("failed: " + ", ".join(failures))
    # the last line is exactly "N passed, N failed" (CI reads it); skips are said just before
    if results["skipped"]:
        print(f"{results['skipped']} skipped (reasons on their SKIP lines)")
    print(f"{results['passed']} passed, {results['failed']} failed", flush=True)
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
