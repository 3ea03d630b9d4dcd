#!/usr/bin/env python3
"""The options the mains share (user/cli/cli_opts.c: -p, -a, -w, -d, --ring-mb,
--py-stacks, --no-stacks, --torch-timeout; user/base/cli_output.c: -o, --json), given to
every main (tptrace, fr, mem, stacks, report, tptrace-fr) with a good and a bad value, and
what each run says: exit status, stdout (its lines, or a digest of a long one), stderr. The
good values name pids above any kernel's pid_max (4194304), which no process can have:
nothing attaches, the run stops at the first target, and no process started meanwhile
changes that. test_cli compares the runs with cli_opts_expected.txt; `cli_opts_cases.py
--write` rewrites it (after a change of behaviour that is meant, said in the commit)."""
import hashlib
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from lib import TPTRACE, fresh_tmp_path  # noqa: E402

EXPECTED = os.path.join(HERE, "cli_opts_expected.txt")
DATA = os.path.join(os.path.dirname(HERE), "tools", "data")


def free_pids(n):
    """n pids no process can have (above PID_MAX_LIMIT, 4194304)"""
    return list(range(999990000, 999990000 + n))


def cases(pid, out, many):
    """(main, argv) pairs; P is the free pid, OUT a path in the test directory. Never -a alone
    where a main takes it: that would record or stop every CUDA process of the host"""
    P = str(pid)
    shared = [
        ["-p", P], ["-p", "abc"], ["-p", "0"], ["-p", "-5"], ["-p", P, "-p", P], [],
        ["-p", P, "-p", "abc"], ["-p", P, "x"],
        ["-a", "-p", P], ["--all", "--pid=" + P], ["-a", "-d", "x"],
        ["-p", P, "-w"], ["-p", P, "--wait"],
        ["-p", P, "-d", "1"], ["-p", P, "-d", "0.5"], ["-p", P, "-d", "-3"], ["-p", P, "-d", "x"],
        ["-p", P, "--duration=0"],
        ["-p", P, "--ring-mb", "8"], ["-p", P, "--ring-mb", "3"], ["-p", P, "--ring-mb", "8192"],
        ["-p", P, "-o", out], ["-p", P, "--output=" + out], ["-p", P, "-o", ""],
        ["-p", P, "--py-stacks"], ["-p", P, "--no-stacks"], ["-p", P, "--py-stacks", "--no-stacks"],
        ["-p", P, "--torch-timeout", "2"], ["-p", P, "--torch-timeout", "x"],
        ["-p", P, "--torch-timeout", "0"],
        ["-p", P, "-q"], ["-p", "abc", "-v"],
    ]
    per_main = {
        "tptrace": [["-a"], ["-p", P] * 65, ["-p", P, "--native-stacks"]],
        "fr": [["-p", P] * 257, ["-a", "--torch-dump"], ["--scope", "pidns", "-p", P],
               ["-p", P, "--torch-dump", "--torch-timeout", "x"]],
        "mem": [["-a"], ["-p", P, "--pickle"], ["-p", P, "--pickle", "--py-stacks", "--no-stacks"],
                ["-p", P, "-p", P, "-d", "x"]],
        "stacks": [[a for p in many[:4097] for a in ("-p", str(p))],
                   [a for p in many[:4096] + [P] for a in ("-p", str(p))], ["-p", P, "--json", "-o", out]],
    }
    for main in ("tptrace", "fr", "mem", "stacks"):
        for argv in shared + per_main[main] + [["-p", P, "--json"]]:
            yield main, argv
    # relative to DATA (render runs these two there): the report prints the trace's path,
    # cut to a width, so an absolute one would make its output depend on the checkout's place
    trace = os.path.join("report_traces", "healthy.json.gz")
    for argv in ([trace], [trace, "--json"], [trace, "-o", out], [trace, "--output=" + out],
                 [trace, "-o", ""], [trace, "--json", "-o", out], [trace, "-p", P], []):
        yield "report", argv
    dumps = "skip"
    for argv in ([dumps], [dumps, "--json"], [dumps, "-o", out], ["--json"], [dumps, "-p", P],
                 [dumps, "--json", "-v"]):
        yield "tptrace-fr", argv


def render(binary=TPTRACE):
    many = free_pids(4097)
    pid = many[0]
    out = fresh_tmp_path("cli_opts.out")
    lines = []
    for main, argv in cases(pid, out, many):
        if main == "tptrace-fr":
            cmd = [os.path.join(os.path.dirname(binary), "tptrace-fr")] + argv
        else:
            cmd = [binary] + ([] if main == "tptrace" else [main]) + argv
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                           cwd=DATA if main in ("report", "tptrace-fr") else None)
        shown = " ".join(argv) if len(argv) < 20 else \
            " ".join(argv[:2]) + f" ... ({len(argv)} args)"
        lines.append(f"$ {main} {shown}".rstrip().replace(str(pid), "PID").replace(out, "OUT")
                     .replace(DATA, "DATA"))
        lines.append(f"rc={p.returncode}")
        long = len(p.stdout.splitlines()) > 3 or len(p.stdout) > 300
        if long:
            lines.append(f"out: {len(p.stdout.splitlines())} lines, sha1 "
                         f"{hashlib.sha1(p.stdout.replace(out, 'OUT').encode()).hexdigest()}")
        for name, text in (("out", "" if long else p.stdout),
                           ("err", p.stderr)):
            for l in text.splitlines():
                lines.append(f"{name}: {l}".replace(str(pid), "PID").replace(out, "OUT")
                             .replace(binary + ":", "tptrace:").replace(DATA, "DATA")
                             .replace(os.path.dirname(binary) + "/tptrace-fr:", "tptrace-fr:"))
        if os.path.exists(out):
            lines.append("wrote OUT")
            os.unlink(out)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = render(sys.argv[2] if len(sys.argv) > 2 else TPTRACE)
    if len(sys.argv) > 1 and sys.argv[1] == "--write":
        with open(EXPECTED, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
