"""Tier 2: `tptrace fr` on simulated NCCL ranks whose first ncclCommInitRank fails: the sim,
like real NCCL, returns ncclInvalidArgument (4) for rank >= nranks (tests/workloads/nccl_rank.c
--bad-init). Each dump holds the failed init as an init_failed comm and a failed comm_init
entry, beside the job's working comm (docs/fr-schema.md)."""
import os
from lib import need_root
from ncclib import Job

NCCL_INVALID_ARGUMENT = 4


def fnv1a(data, seed=0):
    h = 0xcbf29ce484222325 ^ seed
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def test_fr_init_failed_sim():
    need_root()
    nranks, steps = 2, 2
    job = Job(nranks, "healthy", steps=steps, extra=["--init-after-go", "--bad-init"],
              name="init-failed")
    try:
        job.record()
        job.run_clean()
    finally:
        job.kill()
    for w in job.ranks:
        assert f"bad init rc={NCCL_INVALID_ARGUMENT}" in w.out.text(), w.out.text()
    with open(os.path.join(job.dir, "nccl.id")) as f:
        uid = bytes.fromhex(f.read().strip())
    bad = bytearray(uid)
    bad[-1] ^= 0x5A
    good_id, bad_id = fnv1a(uid), fnv1a(bad)
    dumps = job.dumps()
    assert sorted(dumps) == list(range(nranks)), sorted(dumps)
    for rank, d in dumps.items():
        comms = d["comms"]
        # the sim's ncclCommInitRank is built on ncclCommInitRankConfig: the nested failure
        # is recorded once, named after the call the application made
        assert [c["state"] for c in comms] == ["init_failed", "destroyed"], comms
        failed, world = comms
        assert failed["created_by"] == "ncclCommInitRank", failed
        assert failed["init_rc"] == NCCL_INVALID_ARGUMENT and failed["comm_handle"] is None
        assert (failed["comm_id"], failed["rank"], failed["nranks"]) == (bad_id, nranks, nranks)
        assert failed["learned"] == {"comm_id": "init_call", "rank": "init_call",
                                     "nranks": "init_call", "seq_origin": "comm_init"}, failed
        assert failed["cross_rank_id"] is True
        assert (world["comm_id"], world["rank"], world["nranks"]) == (good_id, rank, nranks)
        assert "init_rc" not in world
        e = d["entries"]
        init = e[0]
        assert (init["record_id"], init["op"], init["comm_id"], init["state"], init["rc"]) == \
            (1, "comm_init", bad_id, "failed", NCCL_INVALID_ARGUMENT), init
        assert (init["profiling_name"], init["is_p2p"], init["collective_seq_id"],
                init["p2p_seq_id"], init["count"]) == ("nccl:comm_init", False, 0, 0, 0), init
        for k in ("dtype", "reduce_op", "root", "peer"):
            assert init[k] is None, (k, init)
        for k in ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes"):
            assert init[k] == [], (k, init)
        assert init["api_enter_ns"] < init["api_exit_ns"] and init["thread_id"] == d["pid"]
        # nothing else about the job changed: its collectives follow with their usual seqs
        rest = e[1:]
        assert all(x["comm_id"] == good_id and x["op"] != "comm_init" for x in rest), rest
        assert [x["record_id"] for x in rest] == list(range(2, 2 + len(rest)))
        coll = [x["collective_seq_id"] for x in rest if not x["is_p2p"]]
        assert coll == list(range(1, len(coll) + 1)), coll
        assert world["last_completed_seq"] == len(coll), world
