#!/usr/bin/env python3
"""A small search pipeline in Python on Cohort: project a corpus and its
queries with one matrix product each (gemm), then find each query's nearest
rows by cosine (topk_cosine), with many items in flight, and check every
answer against NumPy.

    PYTHONPATH=build/python python3 examples/pipeline.py [--simulated-gpus N]
"""
import argparse
import concurrent.futures
import sys
import tempfile

import numpy as np

import cohort


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--simulated-gpus", type=int, default=2)
    p.add_argument("--shards", type=int, default=8)
    args = p.parse_args()
    rng = np.random.default_rng(7)
    dim, proj, rows, queries, k = 64, 32, 2000, 4, 5
    w = rng.standard_normal((dim, proj), dtype=np.float32)
    shards = [rng.standard_normal((rows, dim), dtype=np.float32)
              for _ in range(args.shards)]
    q = rng.standard_normal((queries, dim), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp, cohort.Runtime(
            cpu_workers=2, simulated_gpus=args.simulated_gpus, gpus=False,
            audit_path=f"{tmp}/audit.log") as rt:
        # Stage 1: every shard and the queries projected, all in flight.
        projected = [rt.submit("gemm", [s, w], id=i) for i, s in enumerate(shards)]
        pq = rt.run("gemm", [q, w]).values.reshape(queries, proj)
        # Stage 2: as each projection ends, search it.
        searches = {}
        for f in concurrent.futures.as_completed(projected):
            r = f.result()
            searches[r.id] = rt.submit("topk_cosine",
                                       [r.values.reshape(rows, proj), pq],
                                       top_k=k, id=r.id)
        wrong = 0
        for i, f in sorted(searches.items()):
            r = f.result()
            ref = shards[i] @ w
            sims = (ref / np.linalg.norm(ref, axis=1, keepdims=True)) @ (
                pq / np.linalg.norm(pq, axis=1, keepdims=True)).T
            want = np.argsort(-sims, axis=0)[:k].T.reshape(-1)
            got = r.indices
            ok = np.array_equal(np.sort(got.reshape(queries, k), axis=1),
                                np.sort(want.reshape(queries, k), axis=1))
            wrong += not ok
            print(f"shard {i}: top {k} of {rows} rows for {queries} queries "
                  f"on {r.device}: {'matches NumPy' if ok else 'DIFFERS'}")
        s = rt.stats()
        print(f"{s['completed']} items completed, {s['failed']} failed; "
              f"devices: {', '.join(d['name'] for d in rt.devices())}")
        return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
