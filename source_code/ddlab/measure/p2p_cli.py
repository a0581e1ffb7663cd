"""``ddlab p2p``: run the course's CUDA p2p test (:mod:`ddlab.measure.p2p_run`), or read existing
output (:mod:`ddlab.measure.p2p_parse`) or a recorded run (:mod:`ddlab.measure.p2p_diagnosis`); print
the tables and the reading (:func:`ddlab.measure.p2p_diagnosis.summary`).
"""
from __future__ import annotations

import json
import sys

from ddlab.measure import p2p_diagnosis, p2p_parse, p2p_run
from ddlab.measure.p2p import format_tables


def cli(argv: list) -> int:
    import argparse
    p = argparse.ArgumentParser(
        prog="ddlab p2p",
        description="GPU peer-to-peer bandwidth and latency: build and run the course's CUDA test (or read "
                    "existing output, ours or NVIDIA's p2pBandwidthLatencyTest), print the tables and a reading.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--file", help="parse this output file instead of running ('-' = stdin)")
    src.add_argument("--recorded", metavar="NAME", help="show a recorded run, e.g. h200x2")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--copy", choices=("ce", "sm", "both"), help="copy engine, SM kernel or both (default both)")
    p.add_argument("--direction", choices=("write", "read", "both"), help="P2P writes, reads or both (default write)")
    p.add_argument("--size", help="bandwidth message size, e.g. 1G, 256M (default 1G)")
    p.add_argument("--reps", type=int, help="timed copies per bandwidth figure (default 10)")
    p.add_argument("--latency-size", help="latency message size in bytes (default 4)")
    p.add_argument("--latency-reps", type=int, help="copies per latency figure (default 4096)")
    p.add_argument("--latency-batch", type=int, help="copies queued per GPU-timed latency batch (default 256)")
    p.add_argument("--gpus", help="comma-separated GPU ordinals (default all)")
    p.add_argument("--link-peak", type=float, metavar="GBPS",
                   help="the link's peak per direction (ddlab.system.links; NV18: 450) to show the share of peak")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before the run is stopped (default 900)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the program first")
    p.add_argument("--record", metavar="PATH", help="also save the live result with provenance to PATH")
    a = p.parse_args(argv)
    try:
        if a.file:
            if a.file == "-":
                text = sys.stdin.read()
            else:
                with open(a.file) as f:
                    text = f.read()
            result = p2p_parse.parse(text)
            shown = format_tables(result)
        elif a.recorded:
            result = p2p_diagnosis.load_recorded(a.recorded)
            shown = result.text or format_tables(result)
        else:
            result = p2p_run.run(timeout=a.timeout, rebuild=a.rebuild, copy=a.copy, direction=a.direction,
                                 size=a.size, reps=a.reps, latency_size=a.latency_size,
                                 latency_reps=a.latency_reps, latency_batch=a.latency_batch, gpus=a.gpus,
                                 link_peak_gbps=a.link_peak)
            shown = result.text or format_tables(result)
        if a.record:
            if a.file or a.recorded:
                raise ValueError("--record saves a live run; it cannot be combined with --file or --recorded")
            p2p_diagnosis.record(result, path=a.record, command=["ddlab", "p2p", *argv])
    except p2p_run.P2PNoGPU as exc:
        print(f"ddlab p2p: {exc}", file=sys.stderr)
        return 2
    except (p2p_run.P2PError, p2p_parse.P2PParseError, OSError, ValueError, KeyError) as exc:
        print(f"ddlab p2p: {exc}", file=sys.stderr)
        return 1
    reading = p2p_diagnosis.summary(result, a.link_peak)
    if a.json:
        print(json.dumps({"result": result.to_dict(), "summary": reading}, indent=1))
    else:
        print(shown.rstrip("\n"))
        print()
        print("Reading: " + reading)
    return 0
