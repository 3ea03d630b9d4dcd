#!/usr/bin/env python3
"""Every command-line option of the shipped programs (tptrace and its subcommands, tptrace
report, tptrace-fr) is defined once in the tree: one argp_option entry per long name and per
short key. The options the mains share live in user/cli/cli_opts.c (targets, Python) and
user/base/cli_output.c (-o, --json); a main that spelled one of them again in its own table
fails here. Prints one line per problem and exits 1."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the shipped programs' sources (tests/ holds test tools with options of their own)
DIRS = ("user", "tools")
# { "name", key, "ARG" or NULL, flags, ...: an argp_option entry with a long name
ENTRY = re.compile(r'\{\s*"([a-z][a-z0-9-]*)"\s*,\s*(\'(?:\\.|[^\'])\'|[A-Za-z_]\w*|\d+)\s*,'
                   r'\s*(?:NULL|"[^"]*")\s*,')
# where a name or key may be defined twice, and why
TWICE = {
    "verbose": ({"user/core/session.c", "tools/fr/fr.c"},
                "tptrace-fr's -v counts its own verbosity: the -v/-q child is the session's "
                "(user/core), which tools/ do not link"),
    "'v'": ({"user/core/session.c", "tools/fr/fr.c"}, "as --verbose"),
}
SHARED = {"user/cli/cli_opts.c": ["pid", "all", "wait", "duration", "ring-mb", "py-stacks",
                                  "no-stacks", "torch-timeout"],
          "user/base/cli_output.c": ["output", "json"]}


def code(text):
    """text without its comments"""
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def main():
    defs = {}   # name or short key -> [file, ...]
    files = 0
    for top in DIRS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for n in sorted(names):
                if not n.endswith(".c"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, n), ROOT)
                with open(os.path.join(ROOT, rel)) as f:
                    text = code(f.read())
                if "argp_option" not in text:
                    continue
                files += 1
                for name, key in ENTRY.findall(text):
                    defs.setdefault(name, []).append(rel)
                    if key.startswith("'"):
                        defs.setdefault(key, []).append(rel)
    bad = []
    if files < 8 or len(defs) < 60:
        bad.append(f"{files} files with options, {len(defs)} names and keys read: the scan is broken")
    for rel, names in SHARED.items():
        for n in names:
            if defs.get(n) != [rel]:
                bad.append(f"--{n}: defined in {defs.get(n)}, want only {rel}")
    for name, where in sorted(defs.items()):
        if len(where) == 1:
            continue
        allowed = TWICE.get(name)
        if allowed and set(where) == allowed[0] and len(where) == len(allowed[0]):
            continue
        what = name if name.startswith("'") else "--" + name
        bad.append(f"{what} defined {len(where)} times: {', '.join(where)}")
    for line in bad:
        print("FAIL " + line)
    if bad:
        return 1
    print(f"ok {len(defs)} option names and keys in {files} files, each defined once "
          f"(but {', '.join(sorted(TWICE))}: {TWICE['verbose'][1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
