#!/usr/bin/env python3
"""tptrace test runner (make test). Three tiers, see shared STYLE:
  1. unit: .output/unit/test_* binaries and tests/tools/test_* scripts (no root needed)
  2. e2e:  tests/e2e/test_*.py functions, as root with real BPF
  3. smoke: tests/e2e/test_cli.py (help, version, bad input)
Prints one line per test and ends with 'N passed, N failed[, N skipped]'.
Usage: tests/run.py [-k SUBSTRING] [-x]"""
import importlib.util
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

results = {"passed": 0, "failed": 0, "skipped": 0}
failures = []


class Skip(Exception):
    pass


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


def main():
    args = sys.argv[1:]
    pattern = None
    if "-k" in args:
        pattern = args[args.index("-k") + 1]
    stop_first = "-x" in args

    def wanted(name):
        return pattern is None or pattern in name

    # tier 1: unit binaries and tool scripts
    unit_dir = os.path.join(ROOT, ".output", "unit")
    if os.path.isdir(unit_dir):
        for f in sorted(os.listdir(unit_dir)):
            path = os.path.join(unit_dir, f)
            if f.startswith("test_") and os.access(path, os.X_OK) and os.path.isfile(path):
                if wanted(f):
                    run_exe(f"unit/{f}", [path])
    tools_dir = os.path.join(ROOT, "tests", "tools")
    if os.path.isdir(tools_dir):
        for f in sorted(os.listdir(tools_dir)):
            path = os.path.join(tools_dir, f)
            if f.startswith("test_") and os.access(path, os.X_OK) and wanted(f):
                run_exe(f"tools/{f}", [path], timeout=600)

    # tiers 2 and 3: python test modules
    e2e_dir = os.path.join(ROOT, "tests", "e2e")
    for f in sorted(os.listdir(e2e_dir)):
        if not (f.startswith("test_") and f.endswith(".py")):
            continue
        spec = importlib.util.spec_from_file_location(f[:-3], os.path.join(e2e_dir, f))
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except Exception:
            report(f"e2e/{f}", "failed", 0, traceback.format_exc(limit=3))
            continue
        for name in sorted(n for n in dir(mod) if n.startswith("test_")):
            full = f"{f[:-3]}.{name}"
            if not wanted(full):
                continue
            fn = getattr(mod, name)
            t0 = time.time()
            try:
                fn()
                report(full, "passed", time.time() - t0)
            except Skip as e:
                report(full, "skipped", time.time() - t0, str(e))
            except Exception as e:
                if type(e).__name__ == "Skip":
                    report(full, "skipped", time.time() - t0, str(e))
                else:
                    tb = traceback.format_exc(limit=4)
                    report(full, "failed", time.time() - t0, tb.strip())
            if stop_first and failures:
                break
        if stop_first and failures:
            break

    if failures:
        print("failed: " + ", ".join(failures))
    line = f"{results['passed']} passed, {results['failed']} failed"
    if results["skipped"]:
        line += f", {results['skipped']} skipped"
    print(line)
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
