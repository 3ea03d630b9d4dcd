"""Prints the line table of every code object of some stdlib modules, with the line CPython
itself gives each instruction (tests/e2e/test_pyframes.py feeds it to pyframes_lines, which
decodes the tables with user/py/pyframes.c). One line per code object:
    FORMAT FIRSTLINENO HEXTABLE ADDR:LINE ADDR:LINE ...
ADDR in bytes, LINE 0 for none. 3.9: lnotab, lines from dis.findlinestarts; 3.10+: co_lines()."""
import dis
import sys
import types

MODULES = ["threading", "json.decoder", "asyncio.base_events", "collections", "typing",
           "argparse", "dis", "inspect"]


def code_objects(co):
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            yield from code_objects(c)


def source_code(name):
    mod = __import__(name, fromlist=["_"])
    with open(mod.__file__) as f:
        return compile(f.read(), mod.__file__, "exec")


def expected_39(co):
    starts = list(dis.findlinestarts(co))
    out, k, line = [], 0, co.co_firstlineno
    for addr in range(0, len(co.co_code), 2):
        while k < len(starts) and starts[k][0] <= addr:
            line = starts[k][1]
            k += 1
        out.append((addr, line))
    return out


def expected_lines(co):
    out = []
    for start, end, line in co.co_lines():
        out += [(addr, line or 0) for addr in range(start, end, 2)]
    return out


def main():
    minor = sys.version_info[1]
    for name in MODULES:
        for co in code_objects(source_code(name)):
            if minor == 9:
                fmt, table, pairs = "lnotab", co.co_lnotab, expected_39(co)
            else:
                fmt = "lt310" if minor == 10 else "loc"
                table, pairs = co.co_linetable, expected_lines(co)
            print(fmt, co.co_firstlineno, table.hex() or "-",
                  " ".join(f"{a}:{l}" for a, l in pairs))


main()
