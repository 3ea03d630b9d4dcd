#!/usr/bin/env python3
"""The HTML page of `tptrace report -o`, in a real browser: Debian's Chromium, headless.

Each saved report in tests/tools/data/report/ (hand-written to docs/report-schema.md: a healthy
job, a job with findings over 2 ranks, a job without --gpu) is rendered by
.output/report_html_render (the same report_html__write that `tptrace report -o` calls) and
loaded from file:// with --dump-dom. Checked: no console message at all (the page logs nothing
unless something throws), <html data-rendered="1"> and no data-js-errors (set by the page's
error hook, which also catches a syntax error in the renderer), and every plot drawn from the
report's own numbers: as many bars, points and unknown bins as the JSON has, bar widths in
proportion, finding titles and "unknown (why)" where the JSON has null. A report whose kernel
name and finding title hold "</script>" and "<!--" still loads, runs none of it, and shows the
names as text. Screenshots go to .output/test-artifacts/report_html/.

Skips (exit 77) when chromium is not installed (`make deps` installs it). Run from the repo
root after `make .output/report_html_render`. Prints `ok <name>` or `FAIL <name>: reason`."""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

RENDER = ".output/report_html_render"
DATA = "tests/tools/data/report"
ARTIFACTS = ".output/test-artifacts/report_html"
FIXTURES = ("healthy", "findings_2ranks", "no_gpu")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}

failures = []


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.kids, self.text = tag, dict(attrs), parent, [], []

    def walk(self):
        yield self
        for k in self.kids:
            yield from k.walk()

    def find(self, tag=None, **attrs):
        """Descendants (self included) with this tag and these attribute values (True: any)."""
        out = []
        for n in self.walk():
            if tag and n.tag != tag:
                continue
            if all((k.replace("_", "-") in n.attrs) if v is True else
                   n.attrs.get(k.replace("_", "-")) == str(v) for k, v in attrs.items()):
                out.append(n)
        return out

    def all_text(self):
        return "".join(t if isinstance(t, str) else t.all_text() for t in self.text)

    def has_class(self, c):
        return c in (self.attrs.get("class") or "").split()


class TreeBuilder(html.parser.HTMLParser):
    """The DOM as Chromium serialized it, as a tree (SVG elements lower-cased like the rest)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.kids.append(n)
        self.cur.text.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.kids.append(n)
        self.cur.text.append(n)

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text.append(data)


def parse(dom):
    b = TreeBuilder()
    b.feed(dom)
    b.close()
    return b.root


def chromium_bin():
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def chromium(url, *args):
    """stdout and the page's console lines of one headless load of url."""
    with tempfile.TemporaryDirectory(prefix="tptrace-chromium-") as profile:
        p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                            "--no-first-run", "--user-data-dir=" + profile,
                            "--enable-logging=stderr", "--v=0", *args, url],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           errors="replace", timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"chromium exit {p.returncode}: {p.stderr.strip()[-500:]}")
    console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
    return p.stdout, console


def render(report_path, out_path):
    p = subprocess.run([RENDER, report_path, out_path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stderr


def load_page(name, report):
    """Renders report, loads it, screenshots it; the DOM tree and its console lines."""
    tmp = tempfile.mkdtemp(prefix="tptrace-report-html-")
    try:
        return _load_page(tmp, name, report)
    finally:
        shutil.rmtree(tmp)


def _load_page(tmp, name, report):
    src = os.path.join(tmp, name + ".json")
    page = os.path.join(tmp, name + ".html")
    with open(src, "w") as f:
        json.dump(report, f)
    rc, err = render(src, page)
    if rc != 0:
        raise AssertionError(f"render exit {rc}: {err.strip()}")
    url = "file://" + os.path.abspath(page)
    dom, console = chromium(url, "--dump-dom")
    os.makedirs(ARTIFACTS, exist_ok=True)
    chromium(url, "--hide-scrollbars", "--window-size=1100,3000",
             "--screenshot=" + os.path.abspath(os.path.join(ARTIFACTS, name + ".png")))
    with open(page, encoding="utf-8") as f:
        raw = f.read()
    # nothing fetched at view time: no URL but the SVG namespace, no element that loads one
    urls = set(re.findall(r"[a-z]+://[^\s\"')]*", raw)) - {"http://www.w3.org/2000/svg"}
    assert not urls, f"the page names URLs: {sorted(urls)[:5]}"
    assert not re.search(r"\bsrc\s*=|url\(|@import", raw), "the page loads something"
    return parse(dom), console, raw


def check_loaded(root, console):
    html_el = root.find("html")[0]
    assert not console, "console messages:\n" + "\n".join(console)
    assert "data-js-errors" not in html_el.attrs, f"page errors: {html_el.attrs['data-js-errors']}"
    assert html_el.attrs.get("data-rendered") == "1", "the renderer did not finish"
    assert "hidden" in one(root, "div", id="js-error").attrs, "the page shows an error"
    # links only within the page, each to an element that is there
    for a in root.find("a", href=True):
        href = a.attrs["href"]
        assert href.startswith("#") and root.find(id=href[1:]), f"link to {href}"
    for sec in root.find("section"):
        broken = [n.all_text() for n in sec.find("p") if n.has_class("js-error")]
        assert not broken, f"section {sec.attrs.get('id')}: {broken}"
    # the page measured each plot's text once laid out: none runs out of its plot
    clipped = [(svg.attrs.get("data-plot"), svg.attrs["data-clipped"])
               for svg in root.find("svg", data_clipped=True)]
    assert not clipped, f"plots with text cut at their edge (plot, texts): {clipped}"


def one(root, tag, **attrs):
    found = root.find(tag, **attrs)
    assert len(found) == 1, f"{len(found)} <{tag} {attrs}>, expected 1"
    return found[0]


def bars(svg):
    return [n for n in svg.find("rect") if n.has_class("bar")]


def check_plots(root, r):
    """Every plot against the report's own numbers."""
    tl = r.get("timeline") or {}
    util = tl.get("utilization") or []
    svgs = root.find("svg", data_plot="utilization")
    assert len(svgs) == len(util), f"{len(svgs)} utilization plots for {len(util)} devices"
    for d, svg in zip(util, svgs):
        assert svg.attrs["data-device"] == str(d["device"]) and \
            svg.attrs.get("data-rank") == (str(d["rank"]) if "rank" in d else None)
        known = [v for v in d["busy_frac"] if v is not None]
        unknown = len(d["busy_frac"]) - len(known)
        assert svg.attrs["data-points"] == str(len(known))
        assert len([n for n in svg.find("rect") if n.has_class("unknown-bin")]) == unknown
        # the area: two L per known bin, one M and one closing L per run of known bins
        runs = sum(1 for i, v in enumerate(d["busy_frac"])
                   if v is not None and (i == 0 or d["busy_frac"][i - 1] is None))
        path = svg.find("path")[0].attrs["d"]
        assert path.count("L") == 2 * len(known) + runs and path.count("M") == runs, \
            f"device {d['device']}: path has {path.count('L')} L, {path.count('M')} M"
    if not util:
        one(root, "p", data_absent="utilization")
    gaps = tl.get("idle_gaps") or {}
    if gaps.get("counts") and any(gaps["counts"]):
        svg = one(root, "svg", data_plot="idle_gaps")
        got = [float(b.attrs["data-count"]) for b in bars(svg)]
        assert got == [c for c in gaps["counts"] if c is not None], f"idle gap bars {got}"
        # bounds: every bin's (one edge more than counts) or lower ones (the last bin open)
        edges = gaps["edges_ns"]
        num = lambda v: None if v is None else float(v)
        assert [num(b.attrs.get("data-lo")) for b in bars(svg)] == [num(e) for e in edges[:len(got)]]
        his = [num(b.attrs.get("data-hi")) for b in bars(svg)]
        assert his == [None if k + 1 >= len(edges) else num(edges[k + 1])
                       for k in range(len(got))], f"idle gap upper bounds {his}"
        hs = [float(b.attrs["height"]) for b in bars(svg)]
        top = max(gaps["counts"])
        for c, hgt in zip(gaps["counts"], hs):
            assert abs(hgt / max(hs) - c / top) < 0.01, f"gap bar height {hgt} for count {c}"
    else:
        one(root, "p", data_absent="idle_gaps")
    top = (r.get("kernels") or {}).get("top") or []
    if top:
        svg = one(root, "svg", data_plot="kernels")
        bs = bars(svg)
        assert [b.attrs["data-name"] for b in bs] == [k["name"] for k in top], "kernel bar names"
        widths = [float(b.attrs["width"]) for b in bs]
        most = max(k["total_ns"] for k in top)
        for k, wd in zip(top, widths):
            assert abs(wd / max(widths) - k["total_ns"] / most) < 0.01 or wd == 1, \
                f"{k['name'][:40]}: width {wd}"
    else:
        one(root, "p", data_absent="kernels")
    per_rank = [x for x in ((r.get("steps") or {}).get("per_rank") or []) if x.get("steps")]
    if per_rank:
        svg = one(root, "svg", data_plot="steps")
        assert svg.attrs["data-series"] == str(len(per_rank))
        for x in per_rank:
            g = one(svg, "g", data_rank="?" if x["rank"] is None else x["rank"])
            pts = [n for n in g.find("circle") if n.has_class("point")]
            want = [s["wall_ns"] for s in x["steps"] if s.get("wall_ns") is not None]
            assert [float(p.attrs["data-wall-ns"]) for p in pts] == [float(v) for v in want], \
                "step points"
            assert len(g.find("polyline")[0].attrs["points"].split()) == len(want)
    ranks = r.get("ranks") or []
    if ranks:
        svg = one(root, "svg", data_plot="ranks")
        n = sum(1 for x in ranks for k in ("step_wall_ns_mean", "collective_wait_ns")
                if x.get(k) is not None)
        assert len(bars(svg)) == n, f"{len(bars(svg))} rank bars, expected {n}"
        for k in ("step_wall_ns_mean", "collective_wait_ns"):   # each on its own scale
            bs = [b for b in bars(svg) if b.attrs["data-key"] == k]
            want = [x[k] for x in ranks if x.get(k) is not None]
            assert [float(b.attrs["data-ns"]) for b in bs] == [float(v) for v in want], f"{k} bars"
            hs = [float(b.attrs["height"]) for b in bs]
            for v, hgt in zip(want, hs):
                assert abs(hgt / max(hs) - v / max(want)) < 0.01, f"{k}: height {hgt} for {v}"
    else:
        one(root, "p", data_absent="ranks")


def check_findings(root, r):
    arts = root.find("article")
    assert [a.attrs.get("data-finding") for a in arts] == [f["id"] for f in r["findings"]], \
        "finding order"
    for a, f in zip(arts, r["findings"]):
        title = a.find("h3")[0].all_text()
        assert f["title"] in title and f["severity"] in title, f"finding title {title!r}"
        text = a.all_text()
        assert f["fix"] in text, f"fix of {f['id']} not shown"
        for k, v in f["numbers"].items():
            if v is None:
                why = f["numbers"].get(k + "_unknown")
                assert f"unknown ({why})" in text, f"{f['id']}.{k}: no 'unknown ({why})'"
    sec = one(root, "section", id="findings")
    assert sec.attrs["data-findings"] == str(len(r["findings"]))
    cj = one(root, "section", id="cannot-judge")
    items = cj.find("li")
    assert [i.attrs["data-what"] for i in items] == [c["what"] for c in r["cannot_judge"]]
    for i, c in zip(items, r["cannot_judge"]):
        assert c["why"] in i.all_text()


def case(name, fn):
    try:
        fn()
        print(f"ok {name}")
    except AssertionError as e:
        failures.append(name)
        print(f"FAIL {name}: {e}")


def fixture(name):
    with open(os.path.join(DATA, name + ".json"), encoding="utf-8") as f:
        return json.load(f)


def test_fixture(name):
    r = fixture(name)
    root, console, _ = load_page(name, r)
    check_loaded(root, console)
    check_plots(root, r)
    check_findings(root, r)
    return root


def test_healthy():
    root = test_fixture("healthy")
    ok = [n for n in root.walk() if n.has_class("ok")]
    assert ok and "Nothing to fix" in ok[0].all_text(), "healthy job: no 'Nothing to fix'"


def test_findings_2ranks():
    root = test_fixture("findings_2ranks")
    toc = [a.all_text() for a in root.find("a", href=True)]
    assert toc == [f["title"] for f in fixture("findings_2ranks")["findings"]], toc
    # where: null is not a location
    ev = one(root, "article", data_finding="tiny_kernels").find("table", **{"class": "evidence"})[0]
    assert "no Python stack" in ev.all_text()
    # the evidence's time reads from the start of the report, not the raw monotonic clock
    assert "+0 ns" not in ev.all_text() and "+30.0 ms" in ev.all_text(), ev.all_text()[:300]


def test_no_gpu():
    r = fixture("no_gpu")
    root = test_fixture("no_gpu")
    why = "no --gpu data in the trace"
    for plot in ("utilization", "idle_gaps", "kernels", "step_kinds"):
        p = one(root, "p", data_absent=plot)
        assert why in p.all_text(), f"{plot}: {p.all_text()!r}"
    assert not root.find("svg", data_plot="utilization")
    # the per-step GPU numbers are unknown, not 0
    steps = r["steps"]["per_rank"][0]["steps"]
    cells = root.find("td", data_unknown="gpu_busy_ns")
    assert len(cells) == len(steps), f"{len(cells)} unknown gpu_busy cells for {len(steps)} steps"
    assert all(c.all_text() == f"unknown ({why})" for c in cells)
    # a histogram of zeros from traces without GPU records is no histogram
    r["timeline"]["idle_gaps"] = {"edges_ns": [0, 1000, 10000], "counts": [0, 0, 0]}
    r["timeline"]["utilization"] = []
    del r["timeline"]["utilization_unknown"], r["timeline"]["idle_gaps_unknown"]
    zeros, console, _ = load_page("no_gpu_zeros", r)
    check_loaded(zeros, console)
    for plot in ("utilization", "idle_gaps"):
        p = one(zeros, "p", data_absent=plot)
        assert "GPU idle time and its causes" not in p.all_text() and why in p.all_text(), \
            f"{plot}: {p.all_text()!r}"
    assert not zeros.find("svg", data_plot="idle_gaps")
    launch = one(root, "table", data_table="launch")
    assert f"unknown ({why})" in launch.all_text()
    inputs = one(root, "table", data_table="inputs")
    assert "unknown (no RANK in the process environment)" in inputs.all_text()


def test_script_in_names():
    """A kernel name and a finding title that would end the data's <script> element."""
    r = fixture("findings_2ranks")
    attack = ("</script><script>document.documentElement.setAttribute('data-pwned','1')"
              "</script><!--<script>")
    r["kernels"]["top"][0]["name"] = "k" + attack
    r["findings"][0]["title"] += " " + attack
    # U+2028 is a line terminator to a JS parser that evals the text
    r["findings"][1]["evidence"][0]["where"] = "<!-- x.py:1 f\u2028g & h"
    root, console, raw = load_page("script_in_names", r)
    check_loaded(root, console)
    assert "data-pwned" not in root.find("html")[0].attrs, "the name ran as script"
    check_plots(root, r)
    check_findings(root, r)
    # the embedded JSON reads back as the same report
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', raw, re.S)
    assert m and "<" not in m.group(1), "a '<' in the embedded JSON"
    assert json.loads(m.group(1)) == r, "the embedded JSON is not the report"
    assert "\u2028" not in m.group(1) and "\\u2028" in m.group(1), "U+2028 not escaped"
    assert "\u2028g & h" in one(root, "article", data_finding="tiny_kernels").all_text()


def test_long_axis_labels():
    """Step walls of hours and 1e9 s (a wrapped step once read 18446744073 s): the step and
    rank plots' y-axis labels are laid out whole inside the plot (issue 26)"""
    r = fixture("findings_2ranks")
    for k, pr in enumerate(r["steps"]["per_rank"]):
        for i, st in enumerate(pr["steps"]):
            st["wall_ns"] = (k + 1) * 3.6e12 * (i + 1)
    r["steps"]["per_rank"][0]["steps"][0]["wall_ns"] = 737869762.9e9
    for rk in r["ranks"]:
        rk["step_wall_ns_mean"] = 737869762.9e9
    root, console, _ = load_page("long_axis_labels", r)
    check_loaded(root, console)
    steps = one(root, "svg", data_plot="steps")
    labels = [t.all_text() for t in steps.find("text") if t.attrs.get("text-anchor") == "end"]
    assert "500000000 s" in labels, labels


def tptrace_json(*args):
    p = subprocess.run(["./tptrace", "report", "--json"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_ops():
    """The operator table of a --torch --gpu trace: the report's rows, in its order"""
    r = tptrace_json("tests/tools/data/report_traces/torchgpu.json.gz")
    root, console, _ = load_page("ops", r)
    check_loaded(root, console)
    t = one(root, "table", data_table="ops")
    rows = t.find("tr")[1:]
    top = r["ops"]["top"]
    assert len(rows) == min(40, len(top)), len(rows)
    names = [tr.find("td")[0].all_text() for tr in rows]
    assert names == [o["name"] for o in top[:40]], names[:5]
    lp = rows[names.index("launch_phase")].find("td")
    assert lp[7].attrs.get("title") == str(r["ops"]["top"][names.index("launch_phase")]["gpu_total_ns"])
    # without --torch: said why, no table
    r = tptrace_json("tests/tools/data/report_traces/sync.json.gz")
    root, console, _ = load_page("no_ops", r)
    check_loaded(root, console)
    assert "trace with --torch" in one(root, "p", data_absent="ops").all_text()


def test_compare():
    """tptrace report --compare's object: every delta cell is the object's number"""
    c = tptrace_json("--compare", "tests/tools/data/report_traces/sync.json.gz",
                     "tests/tools/data/report_traces/healthy.json.gz")
    root, console, _ = load_page("compare", c)
    check_loaded(root, console)
    steps = one(root, "table", data_table="steps")
    for k in ("before", "after", "delta", "delta_pct"):
        cells = steps.find("td", data_key=k)
        assert [float(x.attrs["data-value"]) for x in cells] == \
            [c["step_wall_ns"]["mean"][k], c["step_wall_ns"]["p50"][k]], k
    arts = root.find("article", data_finding=True)
    assert [(a.attrs["data-finding"], a.attrs["data-status"]) for a in arts] == \
        [(f["id"], f["status"]) for f in c["findings"]]
    gone = arts[0].find("td")
    assert "\u2014" in [x.all_text() for x in gone], "a gone finding's after is not a dash"
    k = one(root, "table", data_table="kernels", data_name="fake_step")
    d = k.find("tr", data_row="mean_ns")[0].find("td", data_key="delta")[0]
    assert float(d.attrs["data-value"]) == c["kernels"][0]["mean_ns"]["delta"]
    assert one(root, "svg", data_plot="compare_steps")


def test_bad_reports():
    tmp = tempfile.mkdtemp(prefix="tptrace-report-html-")
    try:
        cases = [({"steps": {}}, "not a tptrace report (no \"tptrace_report\" version)"),
                 ({"tptrace_report": 2}, "report version 2 is not one this page renders (1)"),
                 ([1, 2], "the report is not a JSON object")]
        for report, want in cases:
            src = os.path.join(tmp, "r.json")
            with open(src, "w") as f:
                json.dump(report, f)
            rc, err = render(src, os.path.join(tmp, "out.html"))
            assert rc == 1 and err == f"report_html_render: {want}\n", f"{report}: {rc} {err!r}"
            assert not os.path.exists(os.path.join(tmp, "out.html"))
        rc, err = render(os.path.join(DATA, "healthy.json"), os.path.join(tmp, "no/such/dir/r.html"))
        assert rc == 1 and err == (f"report_html_render: cannot write {tmp}/no/such/dir/r.html: "
                                   "No such file or directory\n"), err
        rc, err = render(os.path.join(DATA, "healthy.json"), "")
        assert rc == 1 and err == "report_html_render: no path to write the HTML report to\n", err
        # nothing but the page is left behind: the temp file was renamed over the name
        rc, err = render(os.path.join(DATA, "healthy.json"), os.path.join(tmp, "r.html"))
        assert rc == 0 and sorted(os.listdir(tmp)) == ["r.html", "r.json"], os.listdir(tmp)
    finally:
        shutil.rmtree(tmp)


def main():
    global CHROMIUM
    if not os.access(RENDER, os.X_OK):
        print(f"FAIL: {RENDER} not built (make test-bins)")
        return 1
    case("bad_reports", test_bad_reports)
    CHROMIUM = chromium_bin()
    if not CHROMIUM:
        print("skip: chromium is not installed (`make deps` installs Debian's chromium); "
              "the HTML report was not checked in a browser")
        return 1 if failures else 77
    case("healthy", test_healthy)
    case("findings_2ranks", test_findings_2ranks)
    case("no_gpu", test_no_gpu)
    case("script_in_names", test_script_in_names)
    case("long_axis_labels", test_long_axis_labels)
    case("ops", test_ops)
    case("compare", test_compare)
    print(f"screenshots in {ARTIFACTS}/")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
