"""Tier 3: help, version, and every bad input gets one clear error line and no stray file."""
import os
import subprocess
from lib import (TPTRACE, WL, Tracer, Workload, fresh_tmp_path, load_trace, need_root, run_tptrace,
                 tmp_path)


def one_line(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"want one error line, got {lines!r}"
    assert lines[0].startswith("tptrace: "), lines[0]
    return lines[0]


def test_help_and_version():
    rc, out, err = run_tptrace(["--help"])
    assert rc == 0
    for s in ("-p, --pid=PID", "-d, --duration=SEC", "-o, --output=FILE", "--wait", "--py-stacks",
              "--native-stacks", "EXAMPLES"):
        assert s in out, s
    rc, out, err = run_tptrace(["--version"])
    assert rc == 0 and out.startswith("tptrace 0."), out


def test_usage_errors():
    """argp's two lines: the error, then where help is; exit 2."""
    hint = "Try `tptrace --help' or `tptrace --usage' for more information."
    for args, error in (([], "tptrace: no process given: use -p PID"),
                        (["-p", "abc"], "tptrace: invalid pid 'abc'"),
                        (["-p", "1", "-d", "-3"], "tptrace: invalid duration '-3' (seconds > 0)")):
        rc, out, err = run_tptrace(args)
        assert rc == 2 and err.splitlines() == [error, hint] and out == "", (args, rc, err)


def test_unknown_command_names_the_real_ones():
    """A first argument that is no option and no command: one line naming the commands (and the
    nearest one for a typo), exit 2; a stray argument after options stays argp's error."""
    tail = "commands: fr mem stacks report, or -p PID"
    for arg, near in (("frr", "fr"), ("stcks", "stacks"), ("reprot", "report"), ("bogus", None)):
        rc, out, err = run_tptrace([arg, "-p", "1"])
        hint = f" (did you mean {near}?)" if near else ""
        assert rc == 2 and out == "" and one_line(err) == f"tptrace: unknown command '{arg}'{hint}; {tail}", \
            (arg, rc, err)
        assert len(err.rstrip("\n")) <= 100, err
    rc, out, err = run_tptrace(["-p", "1", "extra"])
    assert rc == 2 and err.splitlines()[0] == "tptrace: unexpected argument 'extra'", err


def test_help_has_no_placeholder_bug_address():
    """argp printed "Report bugs to <tptrace issues>." under every help: no address at all."""
    fr = os.path.join(os.path.dirname(TPTRACE), "tptrace-fr")
    for argv in ([TPTRACE, "--help"], [TPTRACE, "fr", "--help"], [TPTRACE, "mem", "--help"],
                 [TPTRACE, "stacks", "--help"], [TPTRACE, "report", "--help"], [fr, "--help"]):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 and "Usage:" in p.stdout, (argv, p.returncode, p.stderr)
        assert "Report bugs" not in p.stdout and "<tptrace issues>" not in p.stdout, (argv, p.stdout[-200:])


HELPS = [[TPTRACE], [TPTRACE, "fr"], [TPTRACE, "mem"], [TPTRACE, "stacks"], [TPTRACE, "report"],
         [os.path.join(os.path.dirname(TPTRACE), "tptrace-fr")]]


def doc_lines(text):
    """--help without the option list and argp's closing note: the hand-laid text"""
    return [l for l in text.splitlines() if l.strip() and not l.startswith("  -") and
            not l.startswith("      ") and not l.startswith("Mandatory or optional") and
            not l.startswith("for any corresponding")]


def test_help_hand_laid_lines_never_broken():
    """argp re-wrapped hand-laid lines longer than its 79 columns mid-phrase (and the man pages
    kept the broken lines): at the default width the text is the same as with no width limit,
    flowing paragraphs (report) aside, and every line of it fits 79 columns."""
    for argv in HELPS:
        a = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=30,
                           env={k: v for k, v in os.environ.items() if k != "ARGP_HELP_FMT"})
        b = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, ARGP_HELP_FMT="rmargin=250"))
        assert a.returncode == 0 and b.returncode == 0, argv
        for l in a.stdout.splitlines():
            assert len(l) <= 79, (argv, l)
        if argv[-1] != "report":     # report's --help is flowing paragraphs, wrapped by argp
            assert doc_lines(a.stdout) == doc_lines(b.stdout), (argv, set(doc_lines(a.stdout)) ^
                                                                 set(doc_lines(b.stdout)))


def test_help_uses_terminal_width():
    """on a 110-column terminal --help's option texts use the width (argp wraps at 109)"""
    import fcntl
    import pty
    import struct
    import termios
    pid, fd = pty.fork()
    if pid == 0:    # the terminal's size, set before the exec (no race with the parent)
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 110, 0, 0))
        os.environ.pop("ARGP_HELP_FMT", None)
        os.execv(TPTRACE, [TPTRACE, "--help"])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    lines = out.decode().replace("\r", "").splitlines()
    assert max(len(l) for l in lines) > 79 and max(len(l) for l in lines) <= 109, \
        sorted(len(l) for l in lines)[-3:]


def free_pid():
    used = {int(d) for d in os.listdir("/proc") if d.isdigit()}
    for pid in range(30000, 1, -1):
        if pid not in used:
            return pid
    raise AssertionError("no free pid")


def test_nonexistent_pid():
    out = fresh_tmp_path("nopid.json")
    pid = free_pid()
    rc, _, err = run_tptrace(["-p", str(pid), "-o", out])
    assert rc == 1
    assert one_line(err) == f"tptrace: pid {pid}: no such process"
    assert not os.path.exists(out)


def test_pid_without_cuda():
    need_root()
    out = fresh_tmp_path("nocuda.json")
    wl = Workload([os.path.join(WL, "nocuda")])
    try:
        rc, _, err = run_tptrace(["-p", str(wl.pid), "-o", out])
        assert rc == 1
        line = one_line(err)
        assert f"pid {wl.pid} (nocuda) has no CUDA runtime loaded" in line and "--wait" in line, line
        assert not os.path.exists(out), "no trace file on failure"
        # --wait: waits, and ends with a valid, empty trace at -d
        tr = Tracer(["-p", str(wl.pid), "-o", out, "--wait", "-d", "1"])
        assert tr.wait(20) == 0, tr.err.text()
        assert tr.err.text().splitlines()[0] == \
            f"tptrace: waiting for pid {wl.pid} (nocuda) to load a CUDA runtime", tr.err.text()
        trace = load_trace(out)
        assert [e for e in trace["traceEvents"] if e["ph"] == "X"] == []
        assert trace["tptrace"]["targets"][0]["cuda_runtimes"] == []
    finally:
        wl.kill()


NOCAPS = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]


def test_not_permitted_no_caps():
    need_root()
    # the target has no capabilities either, so /proc/<pid>/maps is readable without them
    wl = Workload(NOCAPS + [os.path.join(E2E_REAL)])
    try:
        # root without any capability: BPF loading is refused
        p = subprocess.run(NOCAPS + [TPTRACE, "-p", str(wl.pid), "-o", tmp_path("nocap.json")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        assert p.returncode == 1
        line = one_line(p.stderr)
        assert "loading BPF programs: Operation not permitted (run as root" in line, line
        assert not os.path.exists(tmp_path("nocap.json"))
        # an unprivileged user cannot even read the target's maps
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            TPTRACE, "-p", str(wl.pid), "-o", "/tmp/tptrace-nobody.json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        assert p.returncode == 1
        line = one_line(p.stderr)
        assert f"pid {wl.pid}: cannot read /proc/{wl.pid}/maps: Permission denied" in line, line
    finally:
        wl.kill()


def test_unwritable_output():
    need_root()
    wl = Workload([os.path.join(E2E_REAL)])
    try:
        rc, _, err = run_tptrace(["-p", str(wl.pid), "-o", "/nonexistent-dir/t.json"])
        assert rc == 1
        assert one_line(err) == "tptrace: cannot write /nonexistent-dir/t.json: No such file or directory"
        # a full disk: every write fails with ENOSPC, reported once, exit 1, /dev/full untouched
        tr = Tracer(["-p", str(wl.pid), "-o", "/dev/full", "-d", "0.5"])
        rc = tr.wait(20)
        assert rc == 1
        errs = [l for l in tr.err.text().splitlines() if "failed" in l]
        assert errs == ["tptrace: writing /dev/full failed: No space left on device; the trace is incomplete"], errs
        assert os.path.exists("/dev/full")
    finally:
        wl.kill()


from lib import E2E_BIN  # noqa: E402
E2E_REAL = os.path.join(E2E_BIN, "real_args")


def test_shared_options_same_lines():
    """every main given each shared option (user/cli/cli_opts.c, user/base/cli_output.c), a
    good and a bad value: the same exit status, stdout and stderr as cli_opts_expected.txt
    keeps (the lines from before the options became shared argp children, but an empty -o,
    now refused by every main at once as `stacks` did)"""
    import difflib
    from cli_opts_cases import EXPECTED, render
    got = render()
    with open(EXPECTED) as f:
        want = f.read()
    assert got == want, "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                                     "cli_opts_expected.txt", "now", n=2))
