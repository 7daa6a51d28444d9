"""Physical quantities written as strings in config files: '25GB/s', '1.83GHz', '228KB', '300ns'.

Each quantity is parsed into the simulator's base unit for its kind:

=========== ============== ===============================================================
kind        base unit      accepted units
=========== ============== ===============================================================
time        int picosecond ps, ns, us, ms, s           (rounded to the nearest ps)
frequency   int Hz         Hz, kHz, MHz, GHz           (rounded to the nearest Hz)
size        int byte       B, KB, KiB, MB, MiB, GB, GiB, TB, TiB  -- ALL BINARY (1024-based)
bandwidth   float B/s      B/s, KB/s, MB/s, GB/s, TB/s -- DECIMAL (1000-based);
                           KiB/s, MiB/s, GiB/s, TiB/s (binary); Kbps, Mbps, Gbps, Tbps (bits)
=========== ============== ===============================================================

Binary vs decimal, the question gem5 users ask first: we follow how NVIDIA's documents write the
numbers we copy from them. Capacities ("228 KB shared memory per SM", "80 GB HBM3") are powers of
two, so every size unit is 1024-based and KB == KiB. Rates ("25 GB/s per NVLink link",
"3.35 TB/s HBM3") are data-sheet decimal numbers, so bandwidth units are 1000-based (GB/s = 1e9
B/s); write GiB/s for a binary rate. `Gbps` is a bit rate: 1 Gbps = 1e9 / 8 B/s.

A bare number is refused for every kind: a config must say which unit it means.

Every quantity must fit the engine's 64-bit integers (issue 52): a size or frequency at most
INT64_MAX, a bandwidth finite and at most INT64_MAX B/s, and a time at most `MAX_TICKS`, the
simulated-time range of the engine (its clocks compute in femtoseconds, tick x 1000, in 64-bit
integers: engine/clock.py; half of that range is kept as headroom for the delays added to the
current time). A larger value is refused with the range, never wrapped or capped.
"""
from decimal import Decimal, InvalidOperation, ROUND_HALF_EVEN
import re

KINDS = ("time", "frequency", "size", "bandwidth")

#: the largest value a 64-bit signed integer holds
INT64_MAX = 2 ** 63 - 1
#: the simulated-time range, in ps: 2**62 fs (about 4,611 s), half of what the engine's femtosecond
#: arithmetic (engine/clock.py: tick x 1000 in int64) represents, the other half being headroom
MAX_TICKS = 2 ** 62 // 1000

_K, _M, _G, _T = 1024, 1024 ** 2, 1024 ** 3, 1024 ** 4

#: unit -> (kind, factor to the base unit). Factors are exact (int or Decimal).
UNITS = {
    "ps": ("time", 1), "ns": ("time", 10 ** 3), "us": ("time", 10 ** 6),
    "ms": ("time", 10 ** 9), "s": ("time", 10 ** 12),
    "Hz": ("frequency", 1), "kHz": ("frequency", 10 ** 3), "MHz": ("frequency", 10 ** 6),
    "GHz": ("frequency", 10 ** 9),
    "B": ("size", 1), "KB": ("size", _K), "KiB": ("size", _K), "MB": ("size", _M),
    "MiB": ("size", _M), "GB": ("size", _G), "GiB": ("size", _G), "TB": ("size", _T),
    "TiB": ("size", _T),
    "B/s": ("bandwidth", 1), "KB/s": ("bandwidth", 10 ** 3), "MB/s": ("bandwidth", 10 ** 6),
    "GB/s": ("bandwidth", 10 ** 9), "TB/s": ("bandwidth", 10 ** 12),
    "KiB/s": ("bandwidth", _K), "MiB/s": ("bandwidth", _M), "GiB/s": ("bandwidth", _G),
    "TiB/s": ("bandwidth", _T),
    "Kbps": ("bandwidth", Decimal(10 ** 3) / 8), "Mbps": ("bandwidth", Decimal(10 ** 6) / 8),
    "Gbps": ("bandwidth", Decimal(10 ** 9) / 8), "Tbps": ("bandwidth", Decimal(10 ** 12) / 8),
}

EXAMPLES = {"time": "300ns", "frequency": "1.83GHz", "size": "228KB", "bandwidth": "25GB/s"}

_QUANTITY = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z/]+)\s*$")


class UnitError(ValueError):
    """A quantity string that cannot be read as the expected kind (short message, no location)."""


def units_of(kind: str) -> list[str]:
    """The unit names accepted for one kind, in table order."""
    return [u for u, (k, _) in UNITS.items() if k == kind]


def parse_quantity(value, kind: str, limit=None):
    """Parse `value` (e.g. '25GB/s') as a `kind` quantity; return it in the kind's base unit.

    time -> int ps, frequency -> int Hz, size -> int bytes, bandwidth -> float B/s.
    Raises UnitError for bare numbers, unknown units, wrong dimension, negative values,
    sizes that are not a whole number of bytes and values beyond `limit` (default: MAX_TICKS for
    a time, INT64_MAX otherwise; a host time such as run.max_wall passes INT64_MAX).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown quantity kind {kind!r} (kinds: {', '.join(KINDS)})")
    allowed = ", ".join(units_of(kind))
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UnitError(f"expected a {kind} such as '{EXAMPLES[kind]}', found {value!r}")
    if isinstance(value, (int, float)) or _is_number(value):
        raise UnitError(f"expected a quantity with a unit such as '{EXAMPLES[kind]}', found "
                        f"'{value}' (a bare number; {kind} units: {allowed})")
    m = _QUANTITY.match(value)
    if not m:
        raise UnitError(f"expected a {kind} such as '{EXAMPLES[kind]}', found '{value}'")
    number, unit = m.groups()
    if unit not in UNITS:
        raise UnitError(f"'{value}': unknown unit '{unit}' for a {kind} (units: {allowed})")
    found_kind, factor = UNITS[unit]
    if found_kind != kind:
        raise UnitError(f"'{value}' is a {found_kind}, expected a {kind} (units: {allowed})")
    try:
        exact = Decimal(number) * factor
    except ArithmeticError:   # decimal.Overflow: an exponent beyond Decimal's range (1e9999999)
        exact = None
    if exact is not None and exact < 0:
        raise UnitError(f"'{value}': a {kind} cannot be negative")
    if exact is None or exact > quantity_limit(kind, limit):
        raise UnitError(f"'{value}' is too large: expected a {kind} of at most "
                        f"{range_text(kind, limit)}")
    if kind == "bandwidth":
        return float(exact)
    if kind == "size":
        if exact != exact.to_integral_value():
            raise UnitError(f"'{value}' is not a whole number of bytes ({exact} B)")
        return int(exact)
    return int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))


def quantity_limit(kind, limit=None):
    """The largest value of a `kind` quantity (base unit): `limit` if given, else MAX_TICKS for a
    time (simulated), INT64_MAX otherwise."""
    if limit is not None:
        return limit
    return MAX_TICKS if kind == "time" else INT64_MAX


def range_text(kind, limit=None) -> str:
    """The bound of quantity_limit in words, for error messages."""
    top = quantity_limit(kind, limit)
    unit = {"time": "ps", "frequency": "Hz", "size": "B", "bandwidth": "B/s"}[kind]
    if kind == "time" and top == MAX_TICKS:
        return (f"{MAX_TICKS}ps (about {MAX_TICKS // 10 ** 12} s, the simulated-time range of the "
                f"engine's 64-bit femtosecond arithmetic)")
    return f"{top}{unit}" + (" (a 64-bit integer)" if top == INT64_MAX else "")


def _is_number(text: str) -> bool:
    try:
        float(text.replace("_", ""))
        return True
    except ValueError:
        return False


# units a value is shown in, largest first (format_quantity)
_SHOWN = {"time": ("s", "ms", "us", "ns", "ps"), "frequency": ("GHz", "MHz", "kHz", "Hz"),
          "size": ("GiB", "MiB", "KiB", "B"), "bandwidth": ("TB/s", "GB/s", "MB/s", "KB/s", "B/s")}


def format_quantity(value, kind: str) -> str:
    """A base-unit value written back with the largest unit that shows it exactly (1000000000 ps
    -> '1ms', 25e9 B/s -> '25GB/s'); the inverse of parse_quantity for listings."""
    for unit in _SHOWN[kind]:
        factor = UNITS[unit][1]
        if value and value % factor == 0:
            n = value / factor
            return f"{int(n) if float(n).is_integer() else n:g}{unit}"
    return f"{value:g}{_SHOWN[kind][-1]}"


def fmt_time(ps):
    """A tick count as a readable time: '1.5 us' (the run's messages: limits, watchdog,
    interrupts; format_quantity is the exact form for listings)."""
    ps = int(ps)
    for unit, scale in (("s", 10 ** 12), ("ms", 10 ** 9), ("us", 10 ** 6), ("ns", 10 ** 3)):
        if abs(ps) >= scale:
            return f"{ps / scale:g} {unit}"
    return f"{ps} ps"
