#!/usr/bin/env python3
"""A small deterministic draw of tests/tools/fr_sweep.py (the grid of generated fleets checked
for wrong verdicts): 200 configurations, seed 22, every invariant kept. The full sweep is run
by hand (docs/fr-verdicts.md, "The sweep")."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = subprocess.run([sys.executable, os.path.join(HERE, "fr_sweep.py"), "--runs", "200",
                        "--seed", "22", "--budget", "600"], capture_output=True, text=True)
    out = (p.stdout + p.stderr).strip()
    if p.returncode:
        print(f"FAIL fr_sweep: {out}")
        return 1
    print(f"ok fr_sweep: {out.splitlines()[0] if out else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
