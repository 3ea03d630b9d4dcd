#!/usr/bin/env python3
"""The source tree's layout (docs/ARCHITECTURE.md "Layout"): each user/ folder includes only
from the folders before it in the Makefile's USER_DIRS (user/agent's shared-memory header from
anywhere), so dependencies point one way and no two folders include each other; the offline
tools include from user/ only its self-contained helpers (user/base). Prints one line per
include that breaks this and exits 1."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def user_dirs():
    with open(os.path.join(ROOT, "Makefile")) as f:
        m = re.search(r"^USER_DIRS\s*:=\s*(.+)$", f.read(), re.M)
    return m.group(1).split()


def sources(top):
    for d, _, files in os.walk(os.path.join(ROOT, top)):
        for f in files:
            if f.endswith((".c", ".h")):
                yield os.path.join(d, f)


def main():
    order = user_dirs()
    home = {}          # header name -> its user/ folder
    for d in order + ["agent"]:
        for p in sources(os.path.join("user", d)):
            name = os.path.basename(p)
            if name in home:
                print(f"FAIL {name} is in user/{home[name]} and user/{d}: one name, one header")
                return 1
            home[name] = d
    bad = []
    checked = 0
    for top in ["user", "tools"]:
        for p in sources(top):
            rel = os.path.relpath(p, ROOT)
            parts = rel.split(os.sep)
            if top == "user":
                mine = parts[1]
                if mine == "agent":
                    continue
                allowed = set(order[:order.index(mine)]) | {mine, "agent"}
            else:
                mine, allowed = "/".join(parts[:2]), {"base"}
            with open(p) as f:
                for n, line in enumerate(f, 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if not m:
                        continue
                    target = home.get(os.path.basename(m.group(1)))
                    if target is None:
                        continue        # bpf/, generated, tools' own, system
                    checked += 1
                    if target not in allowed:
                        bad.append(f"{rel}:{n}: includes {m.group(1)} (user/{target}); "
                                   f"{mine} may use only {', '.join(sorted(allowed - {mine}))}")
    for b in bad:
        print("FAIL " + b)
    if not checked:
        print("FAIL no include of a user/ header found: the scan is broken")
        return 1
    print(f"ok {checked} includes across folders and within them follow {' < '.join(order)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
