"""Smoke: `make install` as a packager runs it (DESTDIR + PREFIX), the man pages render, the
installed binaries run, and the installed tptrace finds the installed agent (--gpu)."""
import atexit
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from lib import ROOT, WL, Lines, Skip, Workload, load_trace, need_root

PREFIX = "/usr"
FILES = {  # path under DESTDIR -> mode
    "usr/sbin/tptrace": 0o755,
    "usr/bin/tptrace-fr": 0o755,
    "usr/lib/tptrace/libtptrace_agent.so": 0o644,
    "usr/share/man/man8/tptrace.8": 0o644,
    "usr/share/man/man1/tptrace-fr.1": 0o644,
    "usr/lib/systemd/system/tptrace-fr.service": 0o644,
}
_destdir = None


def make_env():
    # a make test parent's flags (jobserver fds, -s) must not leak into this make
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.pop("TPTRACE_AGENT_SO", None)  # the installed layout alone must find the agent
    return env


def make(target, destdir):
    return subprocess.run(["make", "--no-print-directory", "-s", target, f"DESTDIR={destdir}",
                           f"PREFIX={PREFIX}"], cwd=ROOT, env=make_env(), capture_output=True,
                          text=True, timeout=300)


def installed():
    """One `make install` into a temporary DESTDIR per run."""
    global _destdir
    if _destdir is None:
        if not shutil.which("help2man"):
            raise Skip("help2man not installed (make deps installs it)")
        d = tempfile.mkdtemp(prefix="tptrace-install-")
        atexit.register(shutil.rmtree, d, True)
        p = make("install", d)
        assert p.returncode == 0, f"make install rc={p.returncode}: {p.stdout}{p.stderr}"
        _destdir = d
    return _destdir


def test_install_layout_and_man_pages():
    d = installed()
    files = sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)
    assert files == sorted(FILES), files
    for rel, mode in FILES.items():
        st = os.stat(os.path.join(d, rel))
        assert stat.S_IMODE(st.st_mode) == mode, f"{rel}: mode {oct(st.st_mode)}"
    for rel, want in (("usr/sbin/tptrace", "tptrace 0."), ("usr/bin/tptrace-fr", "tptrace-fr 0.")):
        p = subprocess.run([os.path.join(d, rel), "--version"], capture_output=True, text=True,
                           cwd="/", timeout=30)
        assert p.returncode == 0 and p.stdout.startswith(want), (rel, p.returncode, p.stdout)
    with open(os.path.join(d, "usr/lib/systemd/system/tptrace-fr.service")) as f:
        assert "\nExecStart=/usr/sbin/tptrace fr -a " in f.read(), "the installed binary's path"
    # rendered, without groff warnings, with the help texts in it
    for rel, title, must in (
            ("usr/share/man/man8/tptrace.8", "TPTRACE(8)",
             ["NAME", "tptrace - trace CUDA", "--pid=PID", "--gpu", "FLIGHT RECORDER",
              "--dump-dir", "GPU MEMORY", "WHAT TO FIX", "--step=FUNC",
              "tptrace-fr(1)",
              # the hand-laid lines whole (argp broke them mid-phrase at 80 columns)
              "[--py-stacks] [--torch] [--torch-logs LIST] [--torch-trace DIR]"]),
            ("usr/share/man/man1/tptrace-fr.1", "TPTRACE-FR(1)",
             ["NAME", "--tail", "missing dumps, ranks that never entered a collective the others"])):
        path = os.path.join(d, rel)
        g = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", path], capture_output=True,
                           text=True, timeout=30)
        assert g.returncode == 0 and not g.stderr.strip(), f"{rel}: groff: {g.stderr}"
        if shutil.which("man"):
            r = subprocess.run(["man", "-l", path], capture_output=True, text=True, timeout=30,
                               env=dict(make_env(), MANPAGER="cat", MANWIDTH="100"))
        else:
            r = subprocess.run(["groff", "-man", "-Tutf8", path], capture_output=True, text=True,
                               timeout=30)
        text = r.stdout.replace("\u2010", "-").replace("\u2212", "-")
        assert r.returncode == 0 and text.lstrip().startswith(title), (rel, r.stderr, text[:200])
        flat = " ".join(text.split())     # man fills and justifies paragraphs
        for s in must:
            assert s in flat, f"{rel}: {s!r} not in the rendered page"
        # no hand-laid line broken by argp left as a stray fragment ("DIR" alone)
        assert not [l for l in text.splitlines() if l.strip() in ("DIR", "fr_trace")], text


def test_installed_tptrace_gpu_finds_agent():
    """The installed tptrace (DESTDIR/usr/sbin) loads the installed agent (DESTDIR/usr/lib/
    tptrace) into a sim job: GPU kernels and launch->kernel flows in its trace."""
    need_root()
    d = installed()
    out = os.path.join(d, "gpu.json")
    wl = Workload([os.path.join(WL, "sim_train"), "--steps", "20", "--kernel-us", "300", "--hold"])
    tr = None
    try:
        tr = subprocess.Popen([os.path.join(d, "usr/sbin/tptrace"), "-p", str(wl.pid), "--gpu",
                               "-o", out], stderr=subprocess.PIPE, text=True, cwd="/",
                              env=make_env())
        err = Lines(tr.stderr)
        assert err.wait_for(lambda l: l.startswith("tptrace: tracing"), 30), err.text()
        wl.go()
        wl.wait_done()
        tr.send_signal(signal.SIGINT)  # the job holds: the agent is drained and taken out
        rc = tr.wait(30)
        assert rc == 0, f"installed tptrace rc={rc}: {err.text()}"
    finally:
        wl.kill()
        if tr and tr.poll() is None:
            tr.kill()
            tr.wait()
    ev = load_trace(out)["traceEvents"]
    kernels = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"]
    flows = [e for e in ev if e.get("ph") == "s" and e.get("cat") == "ac2g"]
    # sim_train: 4 launches per step (tests/workloads/sim_train.c)
    assert len(kernels) == 20 * 4 and len(flows) >= 20 * 4, (len(kernels), len(flows))


def test_uninstall_removes_every_file():
    d = installed()
    p = make("uninstall", d)
    assert p.returncode == 0, p.stderr
    left = [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs if f != "gpu.json"]
    assert not left, left
