#!/usr/bin/env python3
"""The geo demo's input data, as NumPy .npy files in FOLDER: 20,000 points
on an integer grid (so that many lie exactly on edges and vertices), each
paired with a candidate zone (what a spatial index would give), a weight
per point, and three zones as polygons (one with a hole).

    python3 make_data.py FOLDER
"""
import sys

import numpy as np

# Zones: rings of (x, y) vertices; a zone's first ring is its shell, the
# rest its holes.
ZONES = [
    [[(0, 0), (20, 0), (20, 20), (0, 20)], [(8, 8), (12, 8), (12, 12), (8, 12)]],
    [[(25, 0), (40, 0), (25, 15)]],
    [[(0, 25), (20, 25), (20, 30), (5, 30), (5, 40), (0, 40)]],
]
POINTS = 20000


def main(folder):
    rng = np.random.default_rng(2026)
    vertices, rings, polygons = [], [0], [0]
    for zone in ZONES:
        for ring in zone:
            vertices += ring
            rings.append(len(vertices))
        polygons.append(len(rings) - 1)
    points = rng.integers(-2, 43, size=(POINTS, 2)).astype(np.float64)
    # Each point's candidate: the first zone whose bounding box holds it,
    # else a zone at random.
    which = rng.integers(0, len(ZONES), size=POINTS)
    for z in reversed(range(len(ZONES))):
        shell = np.array(ZONES[z][0], dtype=np.float64)
        lo, hi = shell.min(axis=0), shell.max(axis=0)
        inside = np.all((points >= lo) & (points <= hi), axis=1)
        which[inside] = z
    weight = (rng.integers(1, 1024, size=POINTS) / 1024).astype(np.float32)
    np.save(f"{folder}/points.npy", points)
    np.save(f"{folder}/which.npy", which.astype(np.int64))
    np.save(f"{folder}/weight.npy", weight)
    np.save(f"{folder}/vertices.npy", np.array(vertices, dtype=np.float64))
    np.save(f"{folder}/rings.npy", np.array(rings, dtype=np.int64))
    np.save(f"{folder}/polygons.npy", np.array(polygons, dtype=np.int64))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
