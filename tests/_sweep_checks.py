"""What every row of a real collective sweep must satisfy (tests of collectives_run and collectives_cli)."""
import pytest

from ddlab.measure import collectives

# Small and quick: the real runs use sizes up to 64 KiB and a few iterations.
QUICK = dict(backend="gloo", nproc=2, iters=3, warmup=1, timeout=120)


def check_rows(res, op, n):
    assert res.rows, "no rows"
    esize = 4
    for r in res.rows:
        assert r["time_us"] > 0 and r["time_us_max"] >= r["time_us"] * (1 - 1e-12)
        # algbw = bytes / time, in 10^9 B/s; busbw = algbw * nccl-tests' factor.
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / (r["time_us"] * 1e-6) / 1e9, rel=1e-9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * collectives.bus_factor(op, n), rel=1e-12)
        per_call = r["bytes"] // esize if op == "all_reduce" else r["bytes"] // (esize * n)
        assert r["count"] == per_call
        assert r["iters"] == QUICK["iters"]

