#!/usr/bin/env python3
"""Checks that a memory_viz snapshot (JSON or pickle, as `tptrace mem` writes it) can be
replayed by PyTorch's memory_viz: exit 0 and "ok ..." or exit 1 with one line per violation.

Written from what memory_viz reads (torch/utils/viz/MemoryViz.js), not from its code:
- a final block's address is its segment's address plus the sizes of the blocks before it,
  whatever its own `address` says; blocks in state active_allocated / active_pending_free are
  the live ones;
- each device's `device_traces` is walked backwards from the final state to draw the state
  after every event: a free_requested directly followed by the free_completed of the same
  address counts as one `free`; free / free_completed put the block back (size =
  requested size = the event's size), free_requested alone needs the block, alloc removes it,
  segment_free puts a segment back, segment_unmap puts one back merged with touching
  neighbours of the same stream, segment_alloc removes the segment that starts at its
  address, segment_map cuts its range out of the segment that holds it;
- drawing a state looks up, for every live block, the segment holding its address (a
  TypeError on null when there is none).

Checked here, stricter than what makes memory_viz throw: at every step segments do not
overlap, every block lies whole in one segment, blocks do not overlap, an event finds what it
acts on (the segment at its address with its size, the block with its requested size), no
block outlives the segment removed under it; and in the final segments, blocks tile the
segment, requested_size <= size, and total/allocated/active/requested sizes add up.

Usage: memsnap_check.py SNAPSHOT...   (or import: check(snapshot) -> list of errors)"""
import bisect
import json
import pickle
import sys

ACTIVE = ("active_allocated", "active_pending_free")
STATES = ACTIVE + ("inactive",)
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot")


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:1] == b"\x80":
        return pickle.loads(raw)
    return json.loads(raw)


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_final(snap, errors):
    """The final segments on their own; returns {device: (segments, blocks)}."""
    state = {}
    for n, s in enumerate(snap.get("segments", [])):
        where = f"segment {n}"
        for k in ("device", "address", "total_size", "allocated_size", "active_size",
                  "requested_size", "stream"):
            if not _int(s.get(k)):
                errors.append(f"{where}: {k} is not an integer: {s.get(k)!r}")
                return state
        where = f"segment {n} (device {s['device']}, {s['address']:#x})"
        if s.get("segment_type") not in ("small", "large"):
            errors.append(f"{where}: segment_type {s.get('segment_type')!r}")
        pool = s.get("segment_pool_id")
        if not (isinstance(pool, (list, tuple)) and len(pool) == 2 and all(map(_int, pool))):
            errors.append(f"{where}: segment_pool_id {pool!r} is not a pair of integers")
        addr = s["address"]
        alloc = active = requested = 0
        live = {}
        for i, b in enumerate(s.get("blocks", [])):
            if b.get("state") not in STATES:
                errors.append(f"{where} block {i}: state {b.get('state')!r}")
            if not (_int(b.get("size")) and _int(b.get("requested_size"))) or b["size"] <= 0:
                errors.append(f"{where} block {i}: size {b.get('size')!r}")
                break
            if b.get("address") != addr:
                shown = f"{b['address']:#x}" if _int(b.get("address")) else repr(b.get("address"))
                errors.append(f"{where} block {i}: address {shown}, but the blocks before it "
                              f"end at {addr:#x} (memory_viz draws it there)")
            if b["requested_size"] > b["size"]:
                errors.append(f"{where} block {i}: requested_size {b['requested_size']} > size "
                              f"{b['size']}")
            if b.get("state") == "active_allocated":
                alloc += b["size"]
            if b.get("state") in ACTIVE:
                active += b["size"]
                requested += b["requested_size"]
                live[addr] = {"size": b["size"], "requested": b["requested_size"],
                              "pending": b["state"] == "active_pending_free"}
            addr += b["size"]
        if addr != s["address"] + s["total_size"]:
            errors.append(f"{where}: blocks end at {addr:#x}, the segment at "
                          f"{s['address'] + s['total_size']:#x}")
        for k, v in (("allocated_size", alloc), ("active_size", active), ("requested_size", requested)):
            if s[k] != v:
                errors.append(f"{where}: {k} {s[k]}, its blocks add up to {v}")
        segs, blocks = state.setdefault(s["device"], ([], {}))
        segs.append({"addr": s["address"], "size": s["total_size"], "stream": s["stream"]})
        blocks.update(live)
    return state


class State:
    """Segments and live blocks of one device, both kept sorted by address so that each step
    checks only what it changed (the state before it was checked whole)."""

    def __init__(self, segs, blocks):
        self.segs = sorted((dict(x) for x in segs), key=lambda x: x["addr"])
        self.blocks = {a: dict(b) for a, b in blocks.items()}
        self.addrs = sorted(self.blocks)
        self.starts = None	# segment addresses, rebuilt after a segment change

    def seg_at(self, addr):
        if self.starts is None or len(self.starts) != len(self.segs):
            self.starts = [x["addr"] for x in self.segs]
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.segs[i]["addr"] + self.segs[i]["size"]:
            return self.segs[i]
        return None

    def check_all(self, where, errors):
        for a, b in zip(self.segs, self.segs[1:]):
            if a["addr"] + a["size"] > b["addr"]:
                errors.append(f"{where}: segments {a['addr']:#x}+{a['size']} and {b['addr']:#x} overlap")
                return False
        return all(self.check_block(a, where, errors) for a in self.addrs)

    def check_block(self, addr, where, errors):
        """Block at addr whole in one segment, not overlapping its neighbours."""
        b = self.blocks[addr]
        s = self.seg_at(addr)
        if s is None:
            errors.append(f"{where}: block {addr:#x} lies in no segment (memory_viz: TypeError "
                          "reading 'occupied' of null)")
            return False
        if addr + b["size"] > s["addr"] + s["size"]:
            errors.append(f"{where}: block {addr:#x}+{b['size']} runs past its segment "
                          f"{s['addr']:#x}+{s['size']}")
            return False
        i = bisect.bisect_left(self.addrs, addr)
        if i > 0 and self.addrs[i - 1] + self.blocks[self.addrs[i - 1]]["size"] > addr:
            errors.append(f"{where}: block {addr:#x} overlaps the block at {self.addrs[i - 1]:#x}")
            return False
        if i + 1 < len(self.addrs) and addr + b["size"] > self.addrs[i + 1]:
            errors.append(f"{where}: block {addr:#x}+{b['size']} overlaps the block at "
                          f"{self.addrs[i + 1]:#x}")
            return False
        return True

    def add_block(self, addr, block):
        self.blocks[addr] = block
        bisect.insort(self.addrs, addr)

    def pop_block(self, addr):
        b = self.blocks.pop(addr, None)
        if b is not None:
            self.addrs.pop(bisect.bisect_left(self.addrs, addr))
        return b

    def add_seg(self, seg):
        bisect.insort(self.segs, seg, key=lambda x: x["addr"])
        self.starts = None

    def remove_seg(self, seg):
        self.segs.remove(seg)
        self.starts = None

    def overlapping(self, lo, hi):
        return [x for x in self.segs if x["addr"] < hi and lo < x["addr"] + x["size"]]

    def blocks_in(self, lo, hi):
        """Blocks with any byte in [lo, hi)."""
        i = bisect.bisect_left(self.addrs, lo)
        hit = self.addrs[i:bisect.bisect_left(self.addrs, hi)]
        if i > 0 and self.addrs[i - 1] + self.blocks[self.addrs[i - 1]]["size"] > lo:
            hit.insert(0, self.addrs[i - 1])
        return hit


def annotate(trace):
    """memory_viz's view of one device's events: free_requested + free_completed -> free."""
    out = []
    for e in trace:
        if (e.get("action") == "free_completed" and out and out[-1]["action"] == "free_requested"
                and out[-1]["addr"] == e.get("addr")):
            out[-1] = dict(out[-1], action="free")
            continue
        out.append(dict(e))
    return out


def undo(st, e, where, errors):
    """One step back; False on the first violation."""
    act, addr, size = e["action"], e.get("addr"), e.get("size")
    if act in ("free", "free_completed"):
        if addr in st.blocks:
            errors.append(f"{where}: the block is already there")
            return False
        st.add_block(addr, {"size": size, "requested": size, "pending": act == "free_completed"})
        return st.check_block(addr, where, errors)
    if act == "free_requested":
        if addr not in st.blocks:
            errors.append(f"{where}: no block there (memory_viz: TypeError)")
            return False
        st.blocks[addr]["pending"] = False
    elif act == "alloc":
        b = st.pop_block(addr)
        if b is None:
            errors.append(f"{where}: no block there to remove")
            return False
        if b["requested"] != size:
            errors.append(f"{where}: the block there has requested size {b['requested']}")
            return False
    elif act in ("segment_free", "segment_unmap"):
        new = {"addr": addr, "size": size, "stream": e.get("stream")}
        for x in st.overlapping(addr, addr + size):
            errors.append(f"{where}: overlaps the segment {x['addr']:#x}+{x['size']}")
            return False
        if act == "segment_unmap":	# merged with touching neighbours of the same stream
            for x in list(st.segs):
                if x["stream"] == new["stream"] and (x["addr"] + x["size"] == new["addr"] or
                                                     new["addr"] + new["size"] == x["addr"]):
                    st.remove_seg(x)
                    new = {"addr": min(x["addr"], new["addr"]), "size": x["size"] + new["size"],
                           "stream": new["stream"]}
        st.add_seg(new)
    elif act in ("segment_alloc", "segment_map"):
        if act == "segment_alloc":
            hit = [x for x in st.segs if x["addr"] == addr]
            if not hit:
                errors.append(f"{where}: no segment starts there (memory_viz removes another one)")
                return False
            if hit[0]["size"] != size:
                errors.append(f"{where}: the segment there has size {hit[0]['size']}")
                return False
            st.remove_seg(hit[0])
            gone = (addr, addr + size)
        else:
            hit = [x for x in st.segs if x["addr"] <= addr and addr + size <= x["addr"] + x["size"]]
            if not hit:
                errors.append(f"{where}: no segment holds that range (memory_viz: TypeError)")
                return False
            x = hit[0]
            st.remove_seg(x)
            if x["addr"] < addr:
                st.add_seg({"addr": x["addr"], "size": addr - x["addr"], "stream": x["stream"]})
            if addr + size < x["addr"] + x["size"]:
                st.add_seg({"addr": addr + size, "size": x["addr"] + x["size"] - addr - size,
                            "stream": x["stream"]})
            gone = (addr, addr + size)
        left = st.blocks_in(*gone)
        if left:
            errors.append(f"{where}: block {left[0]:#x} outlives the segment removed under it "
                          "(memory_viz: TypeError reading 'occupied' of null)")
            return False
    elif act not in ACTIONS:
        errors.append(f"{where}: unknown action")
        return False
    return True


def replay(device, trace, segs, blocks, errors):
    st = State(segs, blocks)
    if not st.check_all(f"device {device}, final state", errors):
        return
    events = annotate(trace)
    for i in range(len(events) - 1, -1, -1):
        e = events[i]
        addr = e.get("addr")
        where = f"device {device}, undoing event {i} ({e['action']} {addr:#x} {e.get('size')})" \
            if _int(addr) else f"device {device}, event {i} ({e['action']})"
        if not undo(st, e, where, errors):
            return
    st.check_all(f"device {device}, before the first event", errors)


def check(snap):
    errors = []
    for k in ("segments", "device_traces"):
        if not isinstance(snap.get(k), list):
            return [f"no {k} list"]
    state = check_final(snap, errors)
    if errors:
        return errors
    for d in state:
        if not (_int(d) and 0 <= d < len(snap["device_traces"])):
            errors.append(f"segments on device {d}, which has no device_traces entry")
    for d, trace in enumerate(snap["device_traces"]):
        last = None
        for i, e in enumerate(trace):
            if e.get("action") not in ACTIONS:
                errors.append(f"device {d} event {i}: action {e.get('action')!r}")
            for k in ("addr", "size", "time_us"):
                if not _int(e.get(k)) or e[k] < 0:
                    errors.append(f"device {d} event {i}: {k} {e.get(k)!r}")
            if e.get("action") in ("segment_free", "segment_unmap", "free_completed", "free_requested",
                                   "alloc", "segment_alloc", "segment_map") and not e.get("size"):
                errors.append(f"device {d} event {i}: size 0")
            if _int(e.get("time_us")) and last is not None and e["time_us"] < last:
                errors.append(f"device {d} event {i}: time_us goes back")
            last = e.get("time_us")
        if errors:
            return errors
        segs, blocks = state.get(d, ([], {}))
        replay(d, trace, segs, blocks, errors)
    return errors


def main(paths):
    bad = 0
    for path in paths:
        snap = load(path)
        errors = check(snap)
        for e in errors:
            print(f"{path}: {e}")
        if errors:
            bad += 1
        else:
            n = sum(len(t) for t in snap["device_traces"])
            print(f"ok {path}: {len(snap['segments'])} segments, {n} events replayed")
    return 1 if bad or not paths else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
