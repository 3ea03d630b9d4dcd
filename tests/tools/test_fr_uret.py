#!/usr/bin/env python3
"""tptrace-fr on a dump whose stack snapshot has a frame a uretprobe trampoline hid and nothing
gave back ("unrecoverable": "uretprobe trampoline", docs/fr-schema.md): the verdict's text and
its --json stack say so at that place, never "??" or an offset in some module. The saved
corpus tests/tools/data/hung_missing (rank 1 sleeps while the others wait in ncclAllReduce),
rank 1's snapshots cut at that frame as tptrace stacks cuts them."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

FR = "./tptrace-fr"
SRC = "tests/tools/data/hung_missing"
CULPRIT = "tptrace-fr.node0.10001.json"
UNREC = {"kind": "native", "func": None, "func_off": None, "module": None, "build_id": None,
         "module_off": None, "pc": "0x7fffffffe000", "unrecoverable": "uretprobe trampoline"}


def main():
    failed = []

    def check(cond, what):
        if not cond:
            failed.append(what)
            print("FAIL", what)

    with tempfile.TemporaryDirectory() as d:
        for f in os.listdir(SRC):
            shutil.copy(os.path.join(SRC, f), d)
        path = os.path.join(d, CULPRIT)
        with open(path) as f:
            dump = json.load(f)
        for s in dump["stacks"]:
            t = [t for t in s["threads"] if t["issuing"]][0]
            # clock_nanosleep < pysleep < the trampoline: the Python frames above stay
            natives = [i for i, fr in enumerate(t["frames"]) if fr["kind"] == "native"]
            t["frames"] = t["frames"][:natives[1] + 1] + [UNREC] + \
                [fr for fr in t["frames"][natives[1] + 1:] if fr["kind"] == "python"]
            t["truncated"] = True
            t["unwind_error"] = ("unwind stopped at a uretprobe trampoline: return instances "
                                 "unreadable: loading the task iterator: Operation not permitted")
        with open(path, "w") as f:
            json.dump(dump, f)
        p = subprocess.run([FR, d], capture_output=True, text=True)
        want = ("native frames: clock_nanosleep (libc.so.6+0xe5f1a) < pysleep (python3.11+0x2a1b3c) "
                "< unrecoverable: uretprobe trampoline; no entries in its ring")
        check(p.returncode == 1, f"exit {p.returncode}: {p.stderr}")
        # the text report wraps lines under 100 columns: compare its words unwrapped
        flat = " ".join(p.stdout.split())
        check(want in flat, f"text: want {want!r} in\n{p.stdout}")
        check("??" not in p.stdout, f"text has '??':\n{p.stdout}")
        p = subprocess.run([FR, "--json", d], capture_output=True, text=True)
        v = json.loads(p.stdout)["verdicts"][0]
        check(v["rule"] == "odd_stack" and v["ranks"] == [1], f"verdict {v['rule']} {v['ranks']}")
        natives = [fr for fr in v["stack"] if fr["kind"] == "native"]
        check(natives[2] == {"kind": "native", "func": None, "module": None, "module_off": None,
                             "unrecoverable": "uretprobe trampoline"}, f"json frame {natives[2:]}")
        check(not any("unrecoverable" in fr for fr in natives[:2]), f"json frames {natives}")
    if failed:
        print(f"FAILED {len(failed)} checks")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
