"""ddlab.base.units: one way to write sizes (binary), rates (SI), times, counts, ratios, percentages."""
import math

import numpy as np
import pytest

from ddlab.base import units


@pytest.mark.parametrize("nbytes, text", [
    (0, "0 B"), (3, "3 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (65536, "64 KiB"),
    (1.5 * 2**20, "1.5 MiB"), (512 << 20, "512 MiB"), (1 << 30, "1 GiB"), (1000 * 1024, "1000 KiB"),
    (1.2345 * 2**30, "1.23 GiB"), (3 * 2**40, "3 TiB"), (5 * 2**50, "5120 TiB"),
    # rounding that reaches the next unit moves to it
    (1023.96 * 1024, "1 MiB"), (1023.96, "1 KiB"),
    (-2048, "-2 KiB"),
])
def test_format_bytes(nbytes, text):
    assert units.format_bytes(nbytes) == text


@pytest.mark.parametrize("rate, text", [
    (0, "0 B/s"), (999, "999 B/s"), (16.384e9, "16.4 GB/s"), (450e9, "450 GB/s"),
    (999.96e3, "1 MB/s"),                 # not "1e+03 kB/s", not "1000 kB/s"
    (999_999, "1 MB/s"), (999.4e3, "999 kB/s"), (1.5e12, "1.5 TB/s"), (-5e9, "-5 GB/s"),
])
def test_format_rate_is_si_and_never_exponent(rate, text):
    assert units.format_rate(rate) == text


def test_no_exponent_and_mantissa_in_range_over_many_magnitudes():
    for x in np.geomspace(1e-3, 1e16, 4000):
        for text, base in ((units.format_rate(x), 1000), (units.format_bytes(x), 1024),
                           (units.format_time(x * 1e-12), 1000)):
            number, unit = text.split(" ")
            assert "e" not in number, text
            value = float(number)
            top = unit in ("TB/s", "TiB", "s")
            bottom = unit in ("B/s", "B", "ns")
            assert bottom or value >= 1, text
            assert top or value < base, text


def test_format_gbps_is_format_rate_of_gigabytes():
    assert units.format_gbps(362.1) == "362 GB/s"
    assert units.format_gbps(0.5) == "500 MB/s"
    assert units.format_gbps(None) == units.NA


@pytest.mark.parametrize("seconds, text", [
    (0, "0 s"), (4.16e-6, "4.16 us"), (2.5e-3, "2.5 ms"), (1e-10, "0.1 ns"), (12.3e-9, "12.3 ns"),
    (0.99996, "1 s"), (999.96e-9, "1 us"), (3600, "3600 s"), (-4.2e-6, "-4.2 us"),
])
def test_format_time(seconds, text):
    assert units.format_time(seconds) == text


@pytest.mark.parametrize("fmt", [units.format_bytes, units.format_rate, units.format_time, units.format_count,
                                 units.format_ratio, units.format_percent, units.format_number, units.format_gbps])
def test_missing_values_are_na_and_non_numbers_refused(fmt):
    assert fmt(None) == "n/a"
    assert fmt(float("nan")) == "n/a"
    assert fmt(np.float64("nan")) == "n/a"
    for bad in ("64K", True, [1]):
        with pytest.raises(TypeError, match="must be a number"):
            fmt(bad)


def test_numpy_scalars_are_numbers():
    assert units.format_bytes(np.int64(65536)) == "64 KiB"
    assert units.format_rate(np.float32(16e9)) == "16 GB/s"


def test_counts_ratios_percentages_numbers():
    assert units.format_count(12345.6) == "12,346"
    assert units.format_count(2400, "images/s") == "2,400 images/s"
    assert units.format_count(45.67) == "45.7"
    assert units.format_count(7) == "7"
    assert units.format_count(0) == "0"
    assert units.format_ratio(1.847) == "1.85x"
    assert units.format_ratio(1.8) == "1.80x"          # zeros kept: a column of speedups lines up
    assert units.format_ratio(12.34) == "12.3x"
    assert units.format_percent(0.42) == "42%"
    assert units.format_percent(0.042) == "4.2%"
    assert units.format_percent(0.0004) == "0.04%"
    assert units.format_percent(0.99996) == "100%"
    assert units.format_percent(0.5, decimals=1) == "50.0%"
    assert units.format_percent(-0.25) == "-25%"
    assert units.format_number(42) == "42"
    assert units.format_number(0.012345) == "0.0123"
    assert units.format_number(12345.6) == "12346"
    assert units.format_number(float("inf")) == "inf"


def test_significant_digits():
    assert units.significant(9.996) == "10"
    assert units.significant(99.96) == "100"
    assert units.significant(0.00123456) == "0.00123"
    assert units.significant(1.5, strip=False) == "1.50"
    assert units.significant(-0.0001) == "-0.0001"
    assert units.significant(0) == "0"
    assert units.significant(123456, 2) == "123456"      # the whole part is never cut
    with pytest.raises(ValueError):
        units.significant(1.0, 0)
    assert math.isclose(float(units.significant(math.pi, 5)), 3.1416)


@pytest.mark.parametrize("text, value", [
    ("8", 8), (8, 8), ("64K", 65536), ("64k", 65536), ("512M", 512 << 20), ("1G", 1 << 30),
    ("1GiB", 1 << 30), ("1.5K", 1536), (" 2 M ", 2 << 20), ("1T", 1 << 40), ("3B", 3)])
def test_parse_size(text, value):
    assert units.parse_size(text) == value


@pytest.mark.parametrize("text, match", [
    ("1GB", "ambiguous"), ("12 apples", "cannot read"), ("-5", "cannot read"), (-5, "negative"),
    ("1.3", "whole number"), ("", "cannot read"), (True, "cannot read")])
def test_parse_size_rejects(text, match):
    with pytest.raises(ValueError, match=match):
        units.parse_size(text)


def test_parse_size_reads_what_format_bytes_writes():
    for n in (1, 1024, 65536, 512 << 20, 1 << 30):
        number, unit = units.format_bytes(n).split(" ")
        assert units.parse_size(number + ("" if unit == "B" else unit)) == n


@pytest.mark.parametrize("seconds, text", [
    (0, "0 s"), (44.6, "45 s"), (59.4, "59 s"), (60, "1 min 0 s"), (185, "3 min 5 s"), (3599.6, "1 h 0 min"),
    (3720, "1 h 2 min"), (-3, "0 s"), (None, units.NA), (float("nan"), units.NA),
])
def test_format_duration(seconds, text):
    assert units.format_duration(seconds) == text
