"""raybox: rays against axis-aligned boxes (structs from numpy structured arrays, a const table, the if
expression, a device assert), checked against a numpy float64 slab test; then an inverted box makes
the kernel's assert fail, and the launch raises DeviceAssertionError naming the box."""
import numpy as np

from _driver import compile_example, main

import kcompiler as kc

VEC3 = np.dtype([("x", np.float32), ("y", np.float32), ("z", np.float32)], align=True)
RAY = np.dtype([("origin", VEC3), ("dir", VEC3)], align=True)
BOX = np.dtype([("lo", VEC3), ("hi", VEC3)], align=True)
HIT = np.dtype([("t", np.float32), ("id", np.int32)], align=True)
EDGES = np.array([0.5, 1.0, 2.0, 4.0, 8.0, 16.0])
INF = np.float32(3.0e38)


def _xyz(a):
    return np.stack([a["x"], a["y"], a["z"]], -1).astype(np.float64)


def reference(rays, boxes):
    """Nearest hit distance and box of each ray (float64 slab test), and its distance bin."""
    o, d = _xyz(rays["origin"]), _xyz(rays["dir"])
    lo, hi = _xyz(boxes["lo"]), _xyz(boxes["hi"])
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1.0), float(INF))[:, None, :]
        a, b = (lo[None] - o[:, None]) * inv, (hi[None] - o[:, None]) * inv
    enter = np.maximum(np.minimum(a, b).max(-1), 0.0)
    leave = np.maximum(a, b).min(-1)
    t = np.where(enter <= leave, enter, np.inf)
    best = t.argmin(1)
    tb = t[np.arange(len(rays)), best]
    hit = np.isfinite(tb)
    bins = np.where(hit, (tb[:, None] >= EDGES).sum(1), -1)
    return np.where(hit, tb, float(INF)), np.where(hit, best, -1), bins


def run(target: str, nrays: int = 1000, nboxes: int = 37) -> str:
    rng = np.random.default_rng()
    rays = np.zeros(nrays, RAY)
    for f in "xyz":
        rays["origin"][f] = rng.uniform(-1, 1, nrays)
        rays["dir"][f] = rng.standard_normal(nrays)
    rays["dir"]["z"][::7] = 0.0  # rays parallel to a slab: the if expression's other side
    boxes = np.zeros(nboxes, BOX)
    for f in "xyz":
        c, h = rng.uniform(-12, 12, nboxes), rng.uniform(0.2, 2, nboxes)
        boxes["lo"][f], boxes["hi"][f] = c - h, c + h
    hits, bins = np.zeros(nrays, HIT), np.zeros(nrays, np.int32)
    mod = compile_example("raybox", target)
    grid = (nrays + 127) // 128
    mod.raybox[grid, 128](rays, boxes, hits, bins, nrays, nboxes)
    t, ids, want_bins = reference(rays, boxes)
    # the nearest box may differ where two boxes are hit at (almost) the same distance: compare distances
    close = np.isclose(hits["t"], t, rtol=1e-5, atol=1e-5)
    assert close.all(), f"raybox: {int((~close).sum())} rays' nearest hits differ"
    ok_ids = (hits["id"] == ids) | np.isclose(t, np.where(hits["id"] >= 0, t, np.inf))
    assert ok_ids.all() and ((hits["id"] >= 0) == (ids >= 0)).all(), "raybox: hit/miss differs"
    clear = np.abs(t[:, None] - EDGES).min(1) > 1e-4  # distances not on a bin's edge
    assert (bins[clear] == want_bins[clear]).all(), "raybox: bins differ"
    # an inverted box: the assert stops the launch with the box's index
    bad = boxes.copy()
    bad["lo"]["y"][5], bad["hi"]["y"][5] = bad["hi"]["y"][5], bad["lo"]["y"][5] - 1
    if target == "cpu":  # on a GPU a failed assert leaves the CUDA context unusable (see docs)
        with kc.capture_printf(echo=False) as out:
            try:
                mod.raybox[grid, 128](rays, bad, hits, bins, nrays, nboxes)
            except kc.DeviceAssertionError as e:
                failed = str(e)
            else:
                failed = ""
        assert "box 5 is inverted" in failed and any("box 5 is inverted" in ln for ln in out.lines), failed
    return (f"raybox ok on {target}: {nrays} rays x {nboxes} boxes, {int((ids >= 0).sum())} hits, "
            f"bins {np.bincount(want_bins[want_bins >= 0], minlength=7).tolist()}")


if __name__ == "__main__":
    main(run)
