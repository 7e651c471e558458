#!/usr/bin/env python3
"""bench/dispatch's workload from Python: sums of 1,024 float32 values
through cohort.Runtime, a window of futures in flight, then run() one at a
time for latency. Compare with `bench_dispatch` (the C++ actor, future and
callback clients) on the same machine, interleaved.

    PYTHONPATH=build/python python3 bench/python/dispatch.py [--tasks N] [--runs N]
"""
import argparse
import collections
import os
import tempfile
import time

import numpy as np

import cohort


def one_run(tasks, workers, window, samples):
    x = np.ones(1024, dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        config = (f'devices {{ cpu_workers: {workers} gpus: false }} '
                  f'tenant {{ tenant: "default" kernels: "*" devices: "*" '
                  f'max_inflight: {window} }}')
        with cohort.Runtime(config_text=config,
                            audit_path=f"{tmp}/audit.log") as rt:
            inflight = collections.deque()
            sent = wrong = 0
            start = time.perf_counter()
            while sent < min(window, tasks):
                sent += 1
                inflight.append(rt.submit("reduce_sum", [x], id=sent))
            while inflight:
                r = inflight.popleft().result()
                wrong += r.values[0] != 1024.0
                if sent < tasks:
                    sent += 1
                    inflight.append(rt.submit("reduce_sum", [x], id=sent))
            secs = time.perf_counter() - start
            lat = []
            for i in range(samples):
                t0 = time.perf_counter()
                rt.run("reduce_sum", [x], id=tasks + i + 1)
                lat.append((time.perf_counter() - t0) * 1e6)
    lat.sort()
    return tasks / secs, lat[len(lat) // 2], lat[int(len(lat) * 0.99)], wrong


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=100000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--window", type=int, default=4096)
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    print(f"python dispatch: {a.tasks} tasks (sum of 1024 floats), "
          f"{a.workers} CPU workers, window {a.window}; load average "
          f"{os.getloadavg()[0]:.2f}")
    rates = []
    for run in range(1, a.runs + 1):
        rate, p50, p99, wrong = one_run(a.tasks, a.workers, a.window, a.samples)
        rates.append(rate)
        print(f"{run:<4} cohort python future {rate:12.0f} tasks/s "
              f"p50 {p50:7.1f} us p99 {p99:7.1f} us"
              + (f"  {wrong} WRONG" if wrong else ""))
    rates.sort()
    print(f"tasks/s min / median / max: {rates[0]:.0f} / "
          f"{rates[len(rates) // 2]:.0f} / {rates[-1]:.0f}; load average "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
