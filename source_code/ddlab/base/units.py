"""Units: how every size, rate, time and count the course prints is written.

One rule per kind of number, so a table, a plot label and a sentence agree:

- **Sizes are binary**: ``B``, ``KiB`` (2**10 bytes), ``MiB``, ``GiB``, ``TiB``, as message sizes
  and memory are counted (nccl-tests' ``-b``/``-e`` take ``64K``, ``1G`` in powers of 1024 too).
- **Rates are SI**: ``B/s``, ``kB/s``, ``MB/s``, ``GB/s`` (10**9 B/s), ``TB/s``, as nccl-tests
  reports algbw/busbw and as link specifications quote bandwidth.
- **Times**: ``ns``, ``us``, ``ms``, ``s`` (ASCII ``us``, so every terminal shows it).
- **Counts** (images/s, parameters): whole numbers with thousands separators, ``12,345``.
- **Ratios** (speedups): ``1.85x``; **percentages** from a fraction: ``0.42 -> "42%"``.

The unit is chosen so the number in front of it lies in [1, 1000) (for binary sizes, [1, 1024)),
after rounding: 999,960 B/s is ``1 MB/s``, never ``1e+03 kB/s`` nor ``1000 kB/s``. Numbers never
use exponent notation; they keep three significant digits (``16.4 GB/s``), all digits of a
whole part (``1020 KiB``), and no trailing zeros (``64 KiB``, ``1.5 MiB``). Negative values keep
their sign (``-4.2 us``, a difference). A missing value (``None`` or NaN) is written ``n/a``
(:data:`NA`), so a table cell or sentence shows that it is missing rather than failing.

:func:`parse_size` reads sizes the way :func:`format_bytes` writes them: ``"64K"``, ``"512M"``,
``"1G"``, ``"1GiB"`` (powers of 1024).
"""
from __future__ import annotations

import math
import numbers
import re
from typing import Optional

NA = "n/a"

SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
RATE_UNITS = ("B/s", "kB/s", "MB/s", "GB/s", "TB/s")
TIME_UNITS = ("ns", "us", "ms", "s")

# What one of each unit is worth in the base unit (bytes, bytes per second, seconds): for values
# stored in another unit, e.g. a busbw in GB/s, ``format_rate(v * RATE_SCALE["GB/s"])``.
SIZE_SCALE = {u: 1024 ** i for i, u in enumerate(SIZE_UNITS)}
RATE_SCALE = {u: 1000 ** i for i, u in enumerate(RATE_UNITS)}
TIME_SCALE = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def is_missing(value) -> bool:
    """``None`` or a NaN (a Python or numpy float)."""
    if value is None:
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, int)) and math.isnan(float(value))


def _number(value, what: str) -> Optional[float]:
    """The value as a float, ``None`` when missing; a clear error for something not a number
    (numpy scalars count as numbers, booleans do not)."""
    if is_missing(value):
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number, got {value!r}")
    v = float(value)
    return None if math.isnan(v) else v


def significant(x: float, digits: int = 3, strip: bool = True) -> str:
    """``x`` with ``digits`` significant digits in plain notation (never ``1e+03``): every digit of
    the whole part is kept (``12345.6 -> "12346"``); with ``strip``, trailing zeros after the
    point are dropped (``1.50 -> "1.5"``, ``64.0 -> "64"``)."""
    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    if x == 0:
        return "0"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    exp = math.floor(math.log10(abs(x)))
    text = f"{x:.{max(digits - 1 - exp, 0)}f}"
    # Rounding may carry into a new digit (9.996 -> "10.00"): then one decimal fewer suffices.
    if "." in text and len(text.lstrip("-").replace(".", "").lstrip("0")) > digits:
        text = f"{x:.{max(digits - 2 - exp, 0)}f}"
    if strip and "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _scaled(value: float, units, base: float, digits: int) -> str:
    sign = "-" if value < 0 else ""
    v = abs(value)
    i = 0
    while i < len(units) - 1 and v >= base:
        v /= base
        i += 1
    # 999.96 kB/s rounds to "1000": that is 1 MB/s.
    if i < len(units) - 1 and float(significant(v, digits)) >= base:
        v /= base
        i += 1
    return f"{sign}{significant(v, digits)} {units[i]}"


def format_bytes(nbytes, digits: int = 3) -> str:
    """A size in binary units: ``65536 -> "64 KiB"``, ``1.5 * 2**20 -> "1.5 MiB"``, ``3 -> "3 B"``,
    ``2**30 -> "1 GiB"``. ``None``/NaN -> ``"n/a"``."""
    v = _number(nbytes, "a size in bytes")
    return NA if v is None else _scaled(v, SIZE_UNITS, 1024, digits)


def format_rate(bytes_per_s, digits: int = 3) -> str:
    """A rate in SI units, as link specs and nccl-tests use: ``16.384e9 -> "16.4 GB/s"``,
    ``999_960 -> "1 MB/s"``. ``None``/NaN -> ``"n/a"``."""
    v = _number(bytes_per_s, "a rate in bytes per second")
    return NA if v is None else _scaled(v, RATE_UNITS, 1000, digits)


def format_gbps(gb_per_s, digits: int = 3) -> str:
    """:func:`format_rate` for a value given in GB/s (10**9 B/s), as sweeps store busbw/algbw."""
    v = _number(gb_per_s, "a rate in GB/s")
    return NA if v is None else format_rate(v * 1e9, digits)


def format_time(seconds, digits: int = 3) -> str:
    """A duration from seconds: ``4.16e-6 -> "4.16 us"``, ``2.5e-3 -> "2.5 ms"``, ``0 -> "0 s"``.
    At and above a second it stays in seconds (``3600 s``). ``None``/NaN -> ``"n/a"``."""
    v = _number(seconds, "a time in seconds")
    if v is None:
        return NA
    if v == 0:
        return "0 s"
    return _scaled(v * 1e9, TIME_UNITS, 1000, digits)


def format_duration(seconds) -> str:
    """Wall-clock time of long work, to the second: ``45 -> "45 s"``, ``185 -> "3 min 5 s"``,
    ``3720 -> "1 h 2 min"``. ``None``/NaN -> ``"n/a"``."""
    v = _number(seconds, "a time in seconds")
    if v is None:
        return NA
    s = int(round(max(0.0, v)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def format_count(n, unit: str = "", digits: int = 3) -> str:
    """A count or a count per second, with thousands separators: ``12345.6 -> "12,346"``,
    ``(2400, "images/s") -> "2,400 images/s"``. Below 100, ``digits`` significant digits
    (``45.67 -> "45.7"``), since a small rate needs its decimals."""
    v = _number(n, "a count")
    if v is None:
        return NA
    text = f"{v:,.0f}" if abs(v) >= 100 or v == int(v) else significant(v, digits)
    return f"{text} {unit}" if unit else text


def format_ratio(x, digits: int = 3) -> str:
    """A ratio such as a speedup: ``1.847 -> "1.85x"``, ``1.8 -> "1.80x"``, ``12.34 -> "12.3x"``
    (``digits`` significant digits, zeros kept so a column of speedups lines up)."""
    v = _number(x, "a ratio")
    return NA if v is None else f"{significant(v, digits, strip=False)}x"


def format_percent(fraction, decimals: Optional[int] = None) -> str:
    """A fraction as a percentage: ``0.42 -> "42%"``, ``0.042 -> "4.2%"``, ``0.0004 -> "0.04%"``.
    By default whole percents from 10% up and two significant digits below; ``decimals`` fixes
    the number of decimals instead."""
    v = _number(fraction, "a fraction")
    if v is None:
        return NA
    pct = 100 * v
    if decimals is not None:
        return f"{pct:.{decimals}f}%"
    if abs(pct) >= 10:
        return f"{pct:.0f}%"
    return f"{significant(pct, 2)}%"


def format_number(x, digits: int = 3) -> str:
    """A plain number with ``digits`` significant digits (``0.012345 -> "0.0123"``); whole numbers
    as they are (``42 -> "42"``)."""
    v = _number(x, "a number")
    if v is None:
        return NA
    if math.isfinite(v) and v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return significant(v, digits)


# ----------------------------------------------------------------------------- reading sizes
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?[bB])?\s*$")


def parse_size(text) -> int:
    """``"8"``, ``"64K"``, ``"512M"``, ``"1G"``, ``"1GiB"`` -> bytes. K, M, G, T are powers of 1024,
    as in nccl-tests' ``-b``/``-e``. ``"1GB"`` is refused: it is ambiguous (10^9 or 2^30?)."""
    if isinstance(text, bool):
        raise ValueError(f"cannot read size {text!r}: write a byte count or a number with K, M or G")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size must not be negative, got {text}")
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"cannot read size {text!r}: write a byte count or a number with K, M or G "
                         f"(powers of 1024, e.g. 64K, 512M, 1G)")
    number, unit, suffix = m.groups()
    if suffix and suffix.lower() == "b" and unit:
        raise ValueError(f"size {text!r} is ambiguous (10^n or 2^n bytes?): write {number}{unit.upper()} "
                         f"or {number}{unit.upper()}iB, which mean powers of 1024 as in nccl-tests")
    value = float(number) * (1024 ** ("KMGT".index(unit.upper()) + 1) if unit else 1)
    if value != int(value):
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(value)
