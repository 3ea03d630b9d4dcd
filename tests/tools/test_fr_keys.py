#!/usr/bin/env python3
"""The dump's key names live in one table, user/base/fr_keys.h: each FRK_ name is its key
spelled in capitals, no key twice, every key documented in docs/fr-schema.md, and the writer,
the generator and the parser spell no key as a literal of their own (a new key goes into the
table, or this fails). Prints one line per problem and exits 1."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (file, what a key written as a literal looks like there)
USERS = [
    ("user/fr/flightrec_dump.c",
     re.compile(r'(?:cJSON_Add\w+ToObject|add_ns|add_hex|add_id)\(\s*\w+,\s*"(\w+)"')),
    ("user/fr/flightrec_stacks.c", re.compile(r'cJSON_Add\w+ToObject\(\s*\w+,\s*"(\w+)"')),
    ("user/fr/fr_net.c", re.compile(r'(?:cJSON_Add\w+ToObject|\bnum)\(\s*\w+,\s*"(\w+)"')),
    ("user/stacks/stacks_class.c", re.compile(r'\badd\(\w+,\s*"(\w+)"')),
    ("tests/tools/fr_gen.c", re.compile(r'\\"(\w+)\\":')),
    ("tools/fr/fr_parse.c", re.compile(r'\b(?:E?KEY|FK_\w+)\(\s*"(\w+)"')),
]
# what a key taken from the table looks like there
USE = re.compile(r"\bFRK_\w+\b")


def read(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


def code(text):
    """text without its /* */ comments (their newlines kept, for line numbers)"""
    return re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)


def main():
    bad = []
    table = re.findall(r'^#define\s+(FRK_\w+)\s+"([^"]*)"', read("user/base/fr_keys.h"), re.M)
    if len(table) < 100:
        print(f"FAIL user/base/fr_keys.h: {len(table)} keys read: the scan is broken")
        return 1
    doc = read("docs/fr-schema.md")
    seen = {}
    for name, key in table:
        if name != "FRK_" + key.upper():
            bad.append(f"user/base/fr_keys.h: {name} is \"{key}\": name it FRK_{key.upper()}")
        if key in seen:
            bad.append(f"user/base/fr_keys.h: \"{key}\" twice ({seen[key]}, {name})")
        seen[key] = name
        if not re.search(r"\b" + re.escape(key) + r"\b", doc):
            bad.append(f"user/base/fr_keys.h: \"{key}\" is not in docs/fr-schema.md")
    names = {n for n, _ in table}
    for rel, literal in USERS:
        text = code(read(rel))
        if '#include "fr_keys.h"' not in text:
            bad.append(f"{rel}: does not include fr_keys.h")
        uses = USE.findall(text)
        if not uses:
            bad.append(f"{rel}: uses no FRK_ key: the scan is broken")
        for u in sorted(set(uses) - names):
            bad.append(f"{rel}: {u} is not in user/base/fr_keys.h")
        for n, line in enumerate(text.splitlines(), 1):
            for m in literal.finditer(line):
                bad.append(f"{rel}:{n}: key \"{m.group(1)}\" written as a literal: use "
                           f"FRK_{m.group(1).upper()} from fr_keys.h")
    for b in bad:
        print("FAIL " + b)
    if not bad:
        print(f"ok {len(table)} dump keys, one table, used by {len(USERS)} files")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
