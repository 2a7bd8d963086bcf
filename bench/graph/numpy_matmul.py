#!/usr/bin/env python3
"""NumPy's float32 matmul GFLOP/s, for `cohort bench graph` to compare with.

Prints one JSON line per (size, rep) in the bench format of docs/architecture.md:
  {"suite": "graph", "metric": "numpy_matmul_gflops", "params": {"n": 256, ...},
   "value": 12.3, "unit": "GFLOP/s", "rep": 0}
Each rep times as many products as fit in --min-seconds (at least one), after
one warm-up product, with time.perf_counter.
"""
import argparse
import ctypes
import json
import time

import numpy as np


def running_blas_core():
    """The kernel set of the BLAS NumPy runs (libblas.so.3): OpenBLAS's
    core name ("SkylakeX", "Prescott", ...), or "reference" without it."""
    try:
        corename = ctypes.CDLL("libblas.so.3").openblas_get_corename
    except (OSError, AttributeError):
        return "reference"
    corename.restype = ctypes.c_char_p
    return "openblas " + corename().decode()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="256,1024,2048")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--min-seconds", type=float, default=0.5)
    args = p.parse_args()
    rng = np.random.default_rng(1)
    try:
        blas = np.__config__.get_info("blas_opt_info").get("libraries", ["?"])
    except Exception:  # noqa: BLE001 - informational only
        blas = ["?"]
    blas_core = running_blas_core()
    for n in (int(s) for s in args.sizes.split(",") if s):
        a = rng.random((n, n), dtype=np.float32)
        b = rng.random((n, n), dtype=np.float32)
        a @ b  # warm-up
        for rep in range(args.reps):
            iters = 0
            start = time.perf_counter()
            while True:
                np.matmul(a, b)
                iters += 1
                elapsed = time.perf_counter() - start
                if elapsed >= args.min_seconds:
                    break
            gflops = 2.0 * n ** 3 * iters / elapsed / 1e9
            print(json.dumps({"suite": "graph", "metric": "numpy_matmul_gflops",
                              "params": {"n": n, "dtype": "float32",
                                         "numpy": np.__version__,
                                         "blas": ",".join(blas),
                                         "blas_core": blas_core},
                              "value": round(gflops, 3), "unit": "GFLOP/s",
                              "rep": rep}), flush=True)


if __name__ == "__main__":
    main()
