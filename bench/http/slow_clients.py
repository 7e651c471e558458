#!/usr/bin/env python3
"""/metrics latency while slow clients hold connections to cohort serve.

Starts `cohort serve` (CPU workers plus 4 simulated GPUs, a free port),
opens --slow connections that each send a partial request and then trickle
one header byte every --trickle seconds, and meanwhile scrapes /metrics
--scrapes times, one scrape at a time, each on a fresh connection. Prints
p50, p99 and max scrape latency with and without the slow clients, how many
slow connections were still open at the end, and the load average.

  bench/http/slow_clients.py [--cohort build/tools/cohort] [--slow 200]
      [--scrapes 500] [--trickle 0.5] [--serve-arg=--http-read-timeout=30]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def start_node(cohort, extra, audit):
    proc = subprocess.Popen(
        [cohort, "serve", "--listen", "127.0.0.1:0", "--audit", audit] + extra,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            # Keep draining its output so that it never blocks on a pipe.
            threading.Thread(target=lambda: [None for _ in proc.stdout],
                             daemon=True).start()
            return proc, int(m.group(1))
    raise SystemExit("cohort serve did not start")


def scrape(port):
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n"
              b"Connection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    elapsed = time.perf_counter() - t0
    if not data.startswith(b"HTTP/1.1 200"):
        raise SystemExit("scrape failed: %r" % data[:100])
    return elapsed


def percentiles(xs):
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]
    return pick(0.50) * 1e3, pick(0.99) * 1e3, xs[-1] * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohort", default="build/tools/cohort")
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--scrapes", type=int, default=500)
    ap.add_argument("--trickle", type=float, default=0.5)
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="an extra argument for cohort serve (repeatable)")
    args = ap.parse_args()
    extra = [a for arg in args.serve_arg for a in arg.split("=", 1)]
    workdir = tempfile.TemporaryDirectory()
    proc, port = start_node(args.cohort, extra,
                            os.path.join(workdir.name, "audit.log"))
    try:
        for _ in range(20):  # warm up
            scrape(port)
        alone = [scrape(port) for _ in range(args.scrapes)]
        slow = []
        for i in range(args.slow):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"POST /v1/tenants/t/quota HTTP/1.1\r\nHost: bench\r\n"
                      b"X-Slow: ")
            slow.append(s)
        stop = threading.Event()

        def trickle():
            while not stop.wait(args.trickle):
                for s in slow:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass
        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        time.sleep(args.trickle * 2)
        held = [scrape(port) for _ in range(args.scrapes)]
        stop.set()
        t.join()
        still_open = 0
        for s in slow:
            s.setblocking(False)
            try:
                s.recv(1)  # an end of stream or an answer: not held
            except BlockingIOError:
                still_open += 1
            except OSError:
                pass
            s.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print("%-34s %9s %9s %9s" % ("/metrics scrape latency", "p50 ms",
                                 "p99 ms", "max ms"))
    print("%-34s %9.2f %9.2f %9.2f" % (("alone",) + percentiles(alone)))
    print("%-34s %9.2f %9.2f %9.2f" % (("%d slow connections held" %
                                         args.slow,) + percentiles(held)))
    print("slow connections still open at the end: %d of %d" %
          (still_open, args.slow))
    print("load average: %.2f %.2f %.2f (%d cores)" %
          (os.getloadavg() + (os.cpu_count(),)))


if __name__ == "__main__":
    main()
