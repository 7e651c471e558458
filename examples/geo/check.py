#!/usr/bin/env python3
"""Checks the geo demo's outputs in the current folder against NumPy:
each point's location worked out here on its own (on an edge or vertex,
else inside by the even-odd rule), the weights the demo's kernel gives,
and each batch's total. Exit 0 when everything agrees.

    python3 check.py [BATCH_ROWS] [ALPHA]
"""
import sys

import numpy as np


def locate(p, rings):
    x, y = p
    crossings = 0
    for ring in rings:
        for (x0, y0), (x1, y1) in zip(ring, ring[1:] + ring[:1]):
            cross = (x1 - x0) * (y - y0) - (y1 - y0) * (x - x0)
            if (cross == 0 and min(x0, x1) <= x <= max(x0, x1)
                    and min(y0, y1) <= y <= max(y0, y1)):
                return 2
            if (y0 > y) != (y1 > y):
                if x < x0 + (y - y0) * (x1 - x0) / (y1 - y0):
                    crossings += 1
    return crossings % 2


def main(batch_rows=2000, alpha=0.5):
    points = np.load("points.npy")
    which = np.load("which.npy")
    weight = np.load("weight.npy")
    vertices = np.load("vertices.npy").reshape(-1, 2)
    rings = np.load("rings.npy")
    polygons = np.load("polygons.npy")
    ring_points = [[tuple(v) for v in vertices[rings[r]:rings[r + 1]]]
                   for r in range(len(rings) - 1)]
    want = np.array([
        locate(p, ring_points[polygons[g]:polygons[g + 1]])
        for p, g in zip(points, which)], dtype=np.int32)
    got = np.load("locations.npy")
    bad = 0
    if got.dtype != np.int32 or got.shape != want.shape:
        print(f"locations.npy: {got.dtype} {got.shape}, want int32 {want.shape}")
        return 1
    if (got != want).any():
        i = int(np.flatnonzero(got != want)[0])
        print(f"locations.npy: point {i} {points[i]} is {got[i]}, want {want[i]}")
        bad += 1
    weighted = np.where(want == 1, weight,
                        np.where(want == 2, np.float32(alpha) * weight, 0)
                        ).astype(np.float32)
    got_w = np.load("weighted.npy")
    if got_w.shape != weighted.shape or (got_w != weighted).any():
        print("weighted.npy differs from the weights worked out here")
        bad += 1
    totals = np.array([weighted[i:i + batch_rows].astype(np.float64).sum()
                       for i in range(0, len(weighted), batch_rows)])
    got_t = np.load("totals.npy")
    if got_t.shape != totals.shape or not np.allclose(got_t, totals, rtol=1e-5):
        print(f"totals.npy: {got_t}, want {totals}")
        bad += 1
    counts = np.bincount(want, minlength=3)
    print(f"check: {len(want)} points: {counts[1]} inside a zone, {counts[2]} "
          f"on an edge, {counts[0]} outside; {len(totals)} batch totals, "
          f"sum {totals.sum():.3f}: {'all agree' if bad == 0 else 'MISMATCH'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*(float(a) if "." in a else int(a) for a in sys.argv[1:])))
