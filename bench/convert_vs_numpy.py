#!/usr/bin/env python3
"""amp's conversions next to numpy's (and ml_dtypes' for bf16/fp8), in one run, one thread.

Runs `amp bench convert --json`, then times numpy on the same array size with the same bandwidth
definition ((bytes read + bytes written) / time, median of repeats), and prints one table with
memcpy as the yardstick for both. numpy is timed two ways: `astype` (what users write; it allocates
the result each call) and `np.copyto(out, src, casting="unsafe")` into a preallocated array.

    pip install numpy ml_dtypes
    python3 bench/convert_vs_numpy.py [--amp build/amp] [--mib 64] [--repeats 9] [--json]

--json adds one JSON object on the last line (what bench/write_benchmarks_md.py reads).
"""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402

try:
    import ml_dtypes
except ImportError:  # bf16/fp8 columns are left empty without it
    ml_dtypes = None


def numpy_dtype(name):
    if name == "f32":
        return np.float32
    if name == "f16":
        return np.float16
    if ml_dtypes is None:
        return None
    return {"bf16": ml_dtypes.bfloat16, "f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}[name]


def median_time(fn, repeats):
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--amp", default="build/amp")
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    out = subprocess.run([args.amp, "bench", "convert", "--json", "--mib", str(args.mib), "--repeats",
                          str(args.repeats)], check=True, capture_output=True, text=True).stdout
    amp = json.loads(out.strip().splitlines()[-1])
    best = {}
    for r in amp["results"]:
        key = (r["src"], r["dst"])
        if key not in best or r["gbps"] > best[key]["gbps"]:
            best[key] = r

    n = args.mib * 1024 * 1024 // 4
    rng = np.random.default_rng(0)
    src32 = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 6, n)).astype(np.float32)
    dst32 = np.empty_like(src32)
    np_memcpy = 2 * src32.nbytes / median_time(lambda: np.copyto(dst32, src32), args.repeats) / 1e9

    print(f"cpu: {amp['cpu']}; {args.mib} MiB of fp32 per conversion; 1 thread; median of {args.repeats}")
    print(f"numpy {np.__version__}, ml_dtypes {getattr(ml_dtypes, '__version__', 'absent')}")
    print(f"memcpy: amp run {amp['memcpy_gbps']:.2f} GB/s (glibc memcpy), numpy run {np_memcpy:.2f} GB/s "
          "(np.copyto); bytes read + written\n")
    # The yardstick is the faster of the two copies: a conversion cannot honestly claim memory speed
    # against the slower one.
    best_copy = max(amp["memcpy_gbps"], np_memcpy)
    hdr = f"{'conversion':<15} {'amp path':<8} {'amp GB/s':>9} {'vs memcpy':>9} {'vs best copy':>12} {'np.astype':>10} {'np.copyto':>10} {'amp/astype':>10} {'amp/copyto':>10}"
    print(hdr)
    print("-" * len(hdr))
    rows = []
    for (s, d), r in best.items():
        sd, dd = numpy_dtype(s), numpy_dtype(d)
        astype = copyto = None
        if sd is not None and dd is not None:
            src = src32 if s == "f32" else src32.astype(sd)
            dst = np.empty(n, dtype=dd)
            traffic = n * (src.itemsize + dst.itemsize)
            astype = traffic / median_time(lambda: src.astype(dd), args.repeats) / 1e9
            copyto = traffic / median_time(lambda: np.copyto(dst, src, casting="unsafe"), args.repeats) / 1e9
        fmt = lambda v: f"{v:10.2f}" if v is not None else f"{'-':>10}"  # noqa: E731
        ratio = lambda v: f"{r['gbps'] / v:9.1f}x" if v else f"{'-':>10}"  # noqa: E731
        print(f"{s + '->' + d:<15} {r['isa']:<8} {r['gbps']:9.2f} {100 * r['vs_memcpy']:8.0f}% {100 * r['gbps'] / best_copy:11.0f}% "
              f"{fmt(astype)} {fmt(copyto)} {ratio(astype)} {ratio(copyto)}")
        rows.append(dict(src=s, dst=d, isa=r["isa"], gbps=r["gbps"], vs_memcpy=r["vs_memcpy"],
                         vs_best_copy=r["gbps"] / best_copy, np_astype_gbps=astype, np_copyto_gbps=copyto,
                         amp_over_astype=r["gbps"] / astype if astype else None,
                         amp_over_copyto=r["gbps"] / copyto if copyto else None))
    if args.json:
        print(json.dumps(dict(bench="convert_vs_numpy", cpu=amp["cpu"], threads=1, mib=args.mib, repeats=args.repeats,
                              command=" ".join(["python3", "bench/convert_vs_numpy.py"] + sys.argv[1:]),
                              date=time.strftime("%Y-%m-%d", time.gmtime()), numpy=np.__version__,
                              ml_dtypes=getattr(ml_dtypes, "__version__", None), memcpy_gbps=amp["memcpy_gbps"],
                              numpy_memcpy_gbps=np_memcpy, results=rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
