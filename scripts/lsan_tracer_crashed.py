#!/usr/bin/env python3
"""Names the failed tests of a meson test log that failed only because
LeakSanitizer's own tracer crashed.

At exit LeakSanitizer stops every thread with a ptrace-based tracer before
it scans memory. That tracer sometimes dies with "Tracer caught signal 11"
on a process whose threads are still ending (a known LLVM flake:
google/sanitizers#1353); the process then fails with "LeakSanitizer has
encountered a fatal error" without any report. `./dev.sh sanitize` runs the
tests named here once more.

Prints the names, one line, separated by spaces, only when every test that
did not pass failed (no timeout) with the tracer's crash in its output and
none shows a sanitizer report (a leak, an AddressSanitizer error, an
UndefinedBehaviorSanitizer error): a real report is never run again. Prints
nothing otherwise.

usage: lsan_tracer_crashed.py build-asan/meson-logs/testlog.json
"""
import json
import sys

CRASH = ("Tracer caught signal", "LeakSanitizer has encountered a fatal error")
REPORTS = (
    "ERROR: LeakSanitizer: detected memory leaks",
    "ERROR: AddressSanitizer",
    "runtime error:",
    "SUMMARY: UndefinedBehaviorSanitizer",
)


def main(path):
    failed = {}
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            line = line.strip()
            if not line:
                continue
            test = json.loads(line)
            result = test.get("result")
            if result in ("OK", "SKIP", "EXPECTEDFAIL"):
                continue
            if result != "FAIL":
                return 0  # a timeout, an unexpected pass: not the tracer
            failed[test["name"]] = test.get("stdout") or ""
    if not failed:
        return 0
    for output in failed.values():
        if not all(sign in output for sign in CRASH):
            return 0
        if any(report in output for report in REPORTS):
            return 0
    print(" ".join(failed))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    sys.exit(main(sys.argv[1]))
