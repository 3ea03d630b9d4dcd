"""What CPython itself says, for the workloads that check tptrace's Python stacks and NCCL
identities (py_stacks.py, py_alloc.py, py_nccl_coll.py, py_nccl_rank.py)."""
import ctypes
import sys
import time


def frames_of(frame, firstlineno=False):
    """The stack from frame outwards, innermost first: [func, file, line(, firstlineno)];
    func is co_qualname from 3.11 and co_name before, as tptrace reports it."""
    out = []
    while frame is not None:
        code = frame.f_code
        func = code.co_qualname if sys.version_info >= (3, 11) else code.co_name
        f = [func, code.co_filename, frame.f_lineno]
        if firstlineno:
            f.append(code.co_firstlineno)
        out.append(f)
        frame = frame.f_back
    return out


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def read_unique_id(path, who):
    """The ncclUniqueId rank 0 wrote to path as 256 hex digits (waits up to 2 minutes)."""
    for _ in range(12000):
        try:
            with open(path) as f:
                hexid = f.readline().strip()
            if len(hexid) >= 256:
                # from_buffer_copy: UniqueId(b) (a c_char array) would stop at the first NUL
                return UniqueId.from_buffer_copy(bytes.fromhex(hexid[:256]))
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    sys.exit(f"{who}: no id file {path}")
