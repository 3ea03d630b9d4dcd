"""Smoke: tests/run.py's selection. --tier picks tiers, -k matches the names as printed, and a
selection that matches nothing is an error, never "0 passed, 0 failed"."""
import importlib.util
import os
import subprocess
import sys
from lib import ROOT

RUN_PY = os.path.join(ROOT, "tests", "run.py")


def runner():
    spec = importlib.util.spec_from_file_location("tptrace_run", RUN_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(*args):
    return subprocess.run([sys.executable, RUN_PY] + list(args), capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def listed(*args):
    p = run("--list", *args)
    assert p.returncode == 0, (args, p.returncode, p.stderr)
    return [tuple(line.split()) for line in p.stdout.splitlines()]


def test_select_and_tiers():
    r = runner()
    tests = [r.Test(n, t, None) for n, t in (("unit/test_decode", "unit"),
                                              ("tools/test_fr.py", "unit"),
                                              ("test_cli.test_help_and_version", "smoke"),
                                              ("test_fr.test_fr_rank_killed", "e2e"))]
    names = lambda sel: [t.name for t in sel]
    assert names(r.select(tests, [])) == names(tests)
    assert names(r.select(tests, ["unit/"])) == ["unit/test_decode"]
    assert names(r.select(tests, ["tools/test_fr.py"])) == ["tools/test_fr.py"]
    assert names(r.select(tests, ["test_cli.test_help_and_version"])) == ["test_cli.test_help_and_version"]
    assert names(r.select(tests, ["unit/", "rank_killed"])) == ["unit/test_decode",
                                                                "test_fr.test_fr_rank_killed"]
    assert r.select(tests, ["no_such_test"]) == []
    assert r.parse_tiers([]) == {"unit", "e2e", "smoke"}
    assert r.parse_tiers(["unit,smoke"]) == {"unit", "smoke"}
    assert r.parse_tiers(["e2e", "smoke"]) == {"e2e", "smoke"}
    try:
        r.parse_tiers(["unit,bogus"])
        raise AssertionError("unknown tier accepted")
    except ValueError:
        pass


def test_names_as_printed_and_tiers_on_the_command_line():
    unit = listed("-k", "unit/")
    assert unit and all(t == "unit" and n.startswith("unit/") for t, n in unit), unit
    assert ("unit", "tools/test_fr.py") in listed("-k", "tools/test_fr.py")
    assert listed("-k", "test_cli.test_help_and_version") == [("smoke", "test_cli.test_help_and_version")]
    smoke = listed("--tier", "smoke")
    assert {t for t, _ in smoke} == {"smoke"} and ("smoke", "test_runner.test_select_and_tiers") in smoke
    both = listed("--tier", "unit,smoke")
    assert {t for t, _ in both} == {"unit", "smoke"}
    assert sorted(listed("--tier", "unit", "--tier", "smoke")) == sorted(both)
    every = listed()
    assert {t for t, _ in every} == {"unit", "e2e", "smoke"}
    # a tier and a name from another tier: nothing
    p = run("--tier", "e2e", "-k", "unit/")
    assert p.returncode == 2 and not p.stdout, (p.returncode, p.stdout)


def test_no_match_is_an_error():
    p = run("-k", "no_such_test_anywhere")
    assert p.returncode == 2, p.returncode
    assert not p.stdout, f"printed {p.stdout!r}"  # no "0 passed, 0 failed"
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no test matches -k 'no_such_test_anywhere'" in lines[0], lines
    p = run("--tier", "bogus")
    assert p.returncode == 2 and "unknown tier 'bogus'" in p.stderr, (p.returncode, p.stderr)


HANG_DRIVER = r'''
import importlib.util, os, subprocess, sys, time
spec = importlib.util.spec_from_file_location("tptrace_run", sys.argv[1])
r = importlib.util.module_from_spec(spec)
spec.loader.exec_module(r)
r.CLEANUP_S, r.CLEANUP_TRIES = 1, 2

def test_waits_on_a_child():
    p = subprocess.Popen(["sleep", "1000"])
    try:
        p.wait()
    finally:
        p.kill()
        p.wait()

def test_swallows_exceptions():
    while True:
        try:
            time.sleep(1000)
        except Exception:
            pass

def test_quick():
    pass

def test_cleanup_hangs():
    try:
        time.sleep(1000)
    finally:
        while True:     # a cleanup that retries whatever stops it
            try:
                time.sleep(1000)
            except BaseException:
                pass

for n in ("test_waits_on_a_child", "test_swallows_exceptions", "test_quick", "test_cleanup_hangs"):
    r.run_fn(n, globals()[n])
print("not reached")
'''


def test_a_hung_test_fails_and_the_run_ends():
    """A test past its limit (TPTRACE_TEST_LIMIT_S) is stopped and failed with where it was
    and what its processes were doing, its cleanup runs and the next test runs; one whose
    cleanup hangs too ends the run with the summary as the last line (CI reads it)."""
    env = dict(os.environ, TPTRACE_TEST_LIMIT_S="1")
    p = subprocess.run([sys.executable, "-c", HANG_DRIVER, RUN_PY], capture_output=True,
                       text=True, timeout=120, env=env)
    out = p.stdout
    assert p.returncode == 1, (p.returncode, out, p.stderr)
    lines = out.splitlines()
    assert lines[-1] == "1 passed, 3 failed", out
    assert "not reached" not in out, out
    fails = [l for l in lines if l.startswith("FAIL ")]
    assert [l.split()[1] for l in fails] == ["test_waits_on_a_child", "test_swallows_exceptions",
                                             "test_cleanup_hangs"], out
    assert fails[0].endswith("stopped past its 1 s limit"), fails[0]
    # where it hung, and the child it waited on, with its state
    block = out.split(fails[0])[1].split(fails[1])[0]
    assert "in test_waits_on_a_child" in block and "in wait" in block, block
    assert any(l.startswith("process ") and ": sleep S " in l for l in block.splitlines()), block
    # the child was killed by the test's own cleanup
    assert "PASS test_quick" in out, out
    assert "in its cleanup; the run stops here" in fails[2], fails[2]
