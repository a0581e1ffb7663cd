#!/usr/bin/env python3
"""Host <-> GPU bandwidth: the course's compiled test beside NVIDIA's nvbandwidth, in one run.

Builds our test (source_code/p2p_bandwidth_latency, ``make host``) and NVIDIA's nvbandwidth
from its source (CMake; Boost.ProgramOptions found under ``--boost-root`` or the system),
runs both on the same GPU for every size from 1 MiB up (pinned host memory, copy engine:
nvbandwidth's host_to_device_memcpy_ce and device_to_host_memcpy_ce), and prints one table:
size, direction, ours, nvbandwidth, ours / nvbandwidth, and both as a % of the link's raw
rate per direction (PCIe generation x lanes, read from nvidia-smi). Writes the same as JSON
with ``--out``. nvbandwidth's source is not part of this repository: get it from
https://github.com/NVIDIA/nvbandwidth and pass ``--nvbandwidth-src``.

    python3 tools/bench_host_link.py --nvbandwidth-src ~/nvbandwidth --out results/host_link_bench.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "source_code"))

from ddlab.base import files  # noqa: E402
from ddlab.base.tables import Table  # noqa: E402
from ddlab.system.links import pcie_x16_gbs  # noqa: E402

OURS_DIR = os.path.join(REPO, "source_code", "p2p_bandwidth_latency")
SIZES_MIB = (1, 4, 16, 64, 256, 1024)
TESTS = {"h2d": "host_to_device_memcpy_ce", "d2h": "device_to_host_memcpy_ce"}


def raw_gbps(gen: int, width: int) -> float:
    """The link's raw rate per direction in GB/s: lanes x GT/s x line-code efficiency / 8 bits
    (the table of generations, Gen6's FLIT factor included, is ddlab.system.links.PCIE_GENERATIONS)."""
    return pcie_x16_gbs(gen, width)


def run(cmd, cwd=None, timeout=900) -> str:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"bench_host_link: {' '.join(map(str, cmd))} failed ({out.returncode}):\n"
                         f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def link_of_gpu(index: int) -> tuple:
    """(max generation, max width) of the GPU's PCIe link, from nvidia-smi."""
    q = "pcie.link.gen.max,pcie.link.width.max,name"
    line = run(["nvidia-smi", "-i", str(index), f"--query-gpu={q}", "--format=csv,noheader,nounits"]).strip()
    gen, width, name = [x.strip() for x in line.split(",", 2)]
    return int(gen), int(width), name


def build_ours() -> str:
    run(["make", "host"], cwd=OURS_DIR)
    return os.path.join(OURS_DIR, "host_bandwidth_latency")


def build_nvbandwidth(src: str, boost_root: str | None, build_dir: str) -> str:
    cmake = shutil.which("cmake")
    if not cmake:
        raise SystemExit("bench_host_link: cmake is needed to build nvbandwidth (pip install cmake)")
    cfg = [cmake, "-S", src, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release"]
    if boost_root:
        cfg += [f"-DBOOST_ROOT={boost_root}", "-DBoost_NO_SYSTEM_PATHS=ON",
                f"-DBOOST_LIBRARYDIR={os.path.join(boost_root, 'lib', 'x86_64-linux-gnu')}"]
    run(cfg)
    run([cmake, "--build", build_dir, "-j", str(os.cpu_count() or 4)])
    return os.path.join(build_dir, "nvbandwidth")


def nvbandwidth_gbps(binary: str, test: str, mib: int, samples: int) -> float:
    """nvbandwidth's figure for one test and buffer size (its JSON output, GPU 0's cell)."""
    text = run([binary, "-t", test, "-b", str(mib), "-i", str(samples), "-j"])
    doc = json.loads(text[text.index("{"):])
    tc = doc["nvbandwidth"]["testcases"][0]
    if tc.get("status") not in (None, "Passed"):
        raise SystemExit(f"bench_host_link: nvbandwidth {test} at {mib} MiB: {tc.get('status')}")
    cells = [float(v) for row in tc["bandwidth_matrix"] for v in row if v not in ("N/A", "", None)]
    return cells[0]


def ours_gbps(binary: str, device: int, repeats: int) -> dict:
    """{(direction, bytes): [GB/s per repeat]} for pinned memory on the GPU's own NUMA node."""
    got: dict = {}
    sizes = ",".join(f"{m}M" for m in SIZES_MIB)
    for _ in range(repeats):
        doc = json.loads(run([binary, "--device", str(device), "--sizes", sizes, "--numa", "none", "--json", "-"]))
        for r in doc["rows"]:
            if r["memory"] == "pinned" and r["direction"] in TESTS:
                got.setdefault((r["direction"], r["bytes"]), []).append(r["gbps"])
    return got


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nvbandwidth-src", required=True, help="a checkout of github.com/NVIDIA/nvbandwidth")
    p.add_argument("--boost-root", help="a Boost install (include/ and lib/x86_64-linux-gnu/) when the system has none")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3, help="runs of each tool; the table shows medians (default 3)")
    p.add_argument("--out", help="also write the table and the raw figures as JSON")
    a = p.parse_args(argv)
    if a.repeats < 3:
        p.error("--repeats must be at least 3: the comparison shows medians and spreads")
    gen, width, name = link_of_gpu(a.device)
    peak = raw_gbps(gen, width)
    ours_bin = build_ours()
    with tempfile.TemporaryDirectory(prefix="nvbw-build-") as build:
        ref_bin = build_nvbandwidth(os.path.abspath(a.nvbandwidth_src), a.boost_root, build)
        env_dev = dict(os.environ, CUDA_VISIBLE_DEVICES=str(a.device))
        os.environ.update(env_dev)
        ours = ours_gbps(ours_bin, 0, a.repeats)
        ref = {}
        for d, test in TESTS.items():
            for mib in SIZES_MIB:
                ref[(d, mib << 20)] = [nvbandwidth_gbps(ref_bin, test, mib, 3) for _ in range(a.repeats)]
    rows = []
    for d in TESTS:
        for mib in SIZES_MIB:
            key = (d, mib << 20)
            o, r = statistics.median(ours[key]), statistics.median(ref[key])
            rows.append({"size": f"{mib} MiB", "direction": d, "ours_gbps": round(o, 2),
                         "ours_range": f"{min(ours[key]):.2f}-{max(ours[key]):.2f}",
                         "nvbandwidth_gbps": round(r, 2), "nvbandwidth_range": f"{min(ref[key]):.2f}-{max(ref[key]):.2f}",
                         "ratio": round(o / r, 3), "ours_pct_raw": round(100 * o / peak, 1),
                         "nvbandwidth_pct_raw": round(100 * r / peak, 1)})
    table = Table([("size", "text"), ("direction", "text"), ("ours_gbps", "number", "ours GB/s"),
                   ("ours_range", "text", "ours min-max"), ("nvbandwidth_gbps", "number", "nvbandwidth GB/s"),
                   ("nvbandwidth_range", "text", "nvbw min-max"), ("ratio", "number", "ours / nvbw"),
                   ("ours_pct_raw", "number", "ours % raw"), ("nvbandwidth_pct_raw", "number", "nvbw % raw")], rows)
    print(f"{name}, PCIe Gen{gen} x{width}: raw {peak:.1f} GB/s per direction; pinned host memory, copy engine, "
          f"median of {a.repeats} runs of each tool")
    print(table.text())
    worst = min(r["ratio"] for r in rows)
    print(f"lowest ours / nvbandwidth: {worst:.3f}")
    if a.out:
        files.write_json(a.out, {"gpu": name, "pcie_gen": gen, "pcie_width": width, "raw_gbps_per_direction": peak,
                                 "repeats": a.repeats, "rows": rows,
                                 "ours_runs": {f"{d}-{b}": v for (d, b), v in ours.items()},
                                 "nvbandwidth_runs": {f"{d}-{b}": v for (d, b), v in ref.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
