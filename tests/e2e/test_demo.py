"""Smoke: tests/demo.sh (make demo's run step) on the built tree traces the sim job with its
GPU timeline, and says so; without the agent it fails loudly instead of printing 0 events."""
import os
import re
import subprocess
import tempfile
from lib import ROOT, need_root


def demo(env_extra):
    with tempfile.TemporaryDirectory(prefix="tptrace-demo-") as d:
        env = dict(os.environ, DEMO_OUT=d, **env_extra)
        p = subprocess.run([os.path.join(ROOT, "tests", "demo.sh")], capture_output=True,
                           text=True, timeout=120, env=env, cwd=ROOT)
        return p.returncode, p.stdout + p.stderr


def test_demo_shows_gpu_timeline():
    """every subcommand, each after the command a user would type: the GPU trace and its
    report, the hung 4-rank job's recorder dumps and verdict, its stacks, a leak"""
    need_root()
    env = {k: "" for k in ("TPTRACE_AGENT_SO",) if k in os.environ}
    rc, out = demo(env)
    assert rc == 0, out
    m = re.search(r"GPU timeline: (\d+) GPU events on their stream tracks, (\d+) launch->kernel arrows", out)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0, out
    assert "'fake_gemm'" in out and "'fake_relu'" in out, out
    # the job launches until the end: its calls after CUPTI was turned off are not losses
    assert "have no CUPTI record" not in out, out
    for cmd in (r"\$ sudo tptrace -p \d+ --gpu -d 3 -o ", r"\$ tptrace report \S+ -o \S+\.html",
                r"\$ sudo tptrace fr (-p \d+ ){4}--dump-dir \S+ --stall-timeout 3",
                r"\$ tptrace-fr \S+", r"\$ sudo tptrace stacks( -p \d+){4}$",
                r"\$ sudo tptrace mem -p \d+ --leaks"):
        assert re.search(cmd, out, re.M), (cmd, out)
    assert "Top kernels by GPU time" in out, out                     # the report
    assert len(re.findall(r"^  tptrace: dumped pid \d+ ", out, re.M)) == 4, out
    assert re.search(r"^\[missing_rank\] rank 2 ", out, re.M), out     # tptrace-fr
    assert re.search(r"^outlier: rank 2: idle in clock_nanosleep", out, re.M), out   # stacks
    assert re.search(r"^  4\.0 MiB: 2 x 2\.0 MiB  cuda:0  pytorch:malloc  at leak_site_b", out, re.M), out
    assert re.search(r"^demo: done in \d+ s", out, re.M), out


def test_demo_fails_without_agent():
    need_root()
    rc, out = demo({"TPTRACE_AGENT_SO": "/nonexistent/libtptrace_agent.so"})
    assert rc != 0 and "demo: FAILED: the trace has no GPU timeline" in out, (rc, out)
