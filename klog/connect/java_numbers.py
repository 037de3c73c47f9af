"""Floating-point numbers as Java's Double.toString and Float.toString print them (the JDK 19+ spec,
Raffaello Giulietti's: the shortest decimal that rounds to the value, the closest of those; a single
digit may give way to a closer two-digit one, e.g. 4.9E-324). Jackson writes a double or float this way
(NumberOutput.toString), so Kafka's JsonConverter does; older JDKs sometimes printed more digits.

Format: 10^-3 <= |d| < 10^7 plain, with at least one digit after the point (100.0, 0.001); otherwise
one digit, '.', the rest (at least one), 'E' and the exponent (1.0E7, 1.2345678E7, 1.0E-4)."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_D = struct.Struct("<d")
_D64 = struct.Struct("<Q")
_SMALLEST_NORMAL = 2.2250738585072014e-308
_SMALLEST_NORMAL_32 = 1.1754943508222875e-38


def java_double(value: float) -> str:
    """Double.toString(value)."""
    a = abs(value)
    if 1e-3 <= a < 1e7:
        return repr(value)  # Python's shortest digits, plain in this range as Java's
    if not math.isfinite(value) or value == 0.0:
        return _special(value)
    if a < _SMALLEST_NORMAL:
        digits, point = _digits(repr(a))
        if len(digits) == 1:
            # the spec's two-digit rule: only a subnormal has so few bits that a two-digit decimal is closer
            digits, point = _closest_of_one_or_two(a, digits, point, _double_bounds(a))
        return _format(value < 0, digits, point)
    return _scientific(repr(value))


def _scientific(text: str) -> str:
    """Python's repr of a double outside [1e-3, 1e7) in Java's notation: 1e+20 -> 1.0E20, 1.5e-05 ->
    1.5E-5 (the same shortest digits), 12345678.0 -> 1.2345678E7, 0.00012 -> 1.2E-4."""
    mantissa, e, exponent = text.partition("e")
    if e:  # d[.ddd]e±xx
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}E{int(exponent)}"
    sign = "-" if mantissa[0] == "-" else ""
    whole, _, fraction = mantissa.lstrip("-").partition(".")
    if whole == "0":  # 0.000ddd: below 1e-3, from 1e-4
        digits = fraction.lstrip("0")
        return f"{sign}{digits[0]}.{digits[1:] or '0'}E-4"
    digits = (whole + fraction).rstrip("0")  # from 1e7, below 1e16
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{len(whole) - 1}"


def java_float(value: float) -> str:
    """Float.toString((float) value): the shortest digits of the float32 nearest the value (0.1f
    prints 0.1, not the 0.10000000149011612 of its widening to a double)."""
    f = to_float32(value)
    if not math.isfinite(f) or f == 0.0:
        return _special(f)
    # Up to 6 digits, decimals of that length lie further apart than a normal float32's rounding
    # interval is wide, and shorter ones too: if this one rounds to the float32, it is the only one
    # that short. It does, as the double does, unless the double is a half-way point between two.
    # (A double read from a float32's shortest text, a database's, prints that text.)
    text = repr(value)
    if 1e-3 <= abs(value) < 1e7 and len(text) <= 7 + (value < 0) and not _half_way(value, f):
        return text  # at most 6 digits, plain in Python's repr as in Java's
    a = abs(f)
    digits, point = _digits(text.lstrip("-"))
    if len(digits) > 6 or a < _SMALLEST_NORMAL_32 or _half_way(value, f):  # else the same as above
        bounds = _float32_bounds(a)
        digits, point = _digits(_shortest_float32(a, bounds, len(digits)))
        if len(digits) == 1 and a < _SMALLEST_NORMAL_32:
            # the spec's two-digit rule: only a subnormal has so few bits that a two-digit decimal is closer
            digits, point = _closest_of_one_or_two(a, digits, point, bounds)
    return _format(f < 0, digits, point)


def _half_way(value: float, f: float) -> bool:
    """Whether a double is half-way between two float32s (f the one it rounds to): 25 bits."""
    return value != f and _D64.unpack(_D.pack(value))[0] & 0xFFFFFFF == 0  # its last 28 bits of 52 naught


def _shortest_float32(a: float, bounds: Bounds, guess: int) -> str:
    """The closest of the shortest decimals that round to a float32, `guess` digits long perhaps.
    Where a decimal of some length rounds to it, one of each greater length does too: bisection."""
    text = _closest_of_length(a, guess, bounds) if guess <= 9 else None
    high = guess
    if text is None:
        text, high = f"{a:.8e}", 9  # 9 digits tell every float32 apart
    low = high
    if high > 1 and (shorter := _closest_of_length(a, high - 1, bounds)) is not None:
        text, low, high = shorter, 1, high - 1
    while low < high:
        middle = (low + high) // 2
        shorter = _closest_of_length(a, middle, bounds)
        if shorter is None:
            low = middle + 1
        else:
            text, high = shorter, middle
    return text


def _closest_of_length(a: float, precision: int, bounds: Bounds) -> str | None:
    """The decimal of `precision` digits closest to a float32 of these bounds that rounds to it, if one does."""
    text = f"{a:.{precision - 1}e}"
    if _within(text, bounds):
        return text
    if bounds[2]:  # a power of two: the gap above is twice the one below, so the next one up may fit
        text = _next_up(text, precision)
        if _within(text, bounds):
            return text
    return None


def to_float32(value: float) -> float:
    """The float32 nearest a double (Java's (float) cast); overflow to an infinity."""
    try:
        return _F32.unpack(_F32.pack(value))[0]
    except OverflowError:  # past the largest float32 and its half-gap
        return math.copysign(math.inf, value)


def _special(value: float) -> str:
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"


def _digits(text: str) -> tuple[str, int]:
    """A positive number's text (Python's repr or %e) as its significant digits d1...dn and the
    exponent i of 0.d1...dn x 10^i."""
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    every = whole + fraction
    significant = every.lstrip("0")
    point = int(exponent or 0) + len(whole) - (len(every) - len(significant))
    return significant.rstrip("0") or "0", point


def _format(negative: bool, digits: str, point: int) -> str:
    """Java's layout of 0.<digits> x 10^point."""
    sign = "-" if negative else ""
    if -3 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if 0 < point <= 7:
        whole = digits[:point].ljust(point, "0")
        return f"{sign}{whole}.{digits[point:] or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


# (the half-way point below, the one above, whether the gaps differ; whether a decimal exactly at a
# half-way point rounds to the value, as round-half-even takes it for an even significand)
Bounds = tuple[Fraction | float, Fraction | float, bool, bool]


def _double_bounds(a: float) -> Bounds:
    below, above = math.nextafter(a, 0.0), math.nextafter(a, math.inf)
    even = _D64.unpack(_D.pack(a))[0] & 1 == 0
    exact = Fraction(a)
    return (exact + Fraction(below)) / 2, (exact + Fraction(above)) / 2, False, even


def _float32_bounds(a: float) -> Bounds:
    # a float32's half-way points are doubles (26 bits at most): exact, and quick to compare
    bits = _U32.unpack(_F32.pack(a))[0]
    below = _F32.unpack(_U32.pack(bits - 1))[0] if bits > 0 else 0.0
    above = 2.0**128 if bits == 0x7F7FFFFF else _F32.unpack(_U32.pack(bits + 1))[0]
    power_of_two = bits & 0x7FFFFF == 0 and bits > 0x7FFFFF
    return (a + below) / 2, (a + above) / 2, power_of_two, bits & 1 == 0


def _within(text: str, bounds: Bounds) -> bool:
    """Whether the decimal `text` rounds to the value whose bounds these are. Where they are doubles
    (a float32's), the text's nearest double decides unless it is a half-way point itself (rounding
    is monotonic): then, as for a double's bounds, the exact fractions do."""
    low, high, _, even = bounds
    if type(low) is float:
        x = float(text)
        if low < x < high:
            return True
        if x < low or x > high:
            return False
    d = Fraction(text)
    return Fraction(low) < d < Fraction(high) or (even and (d == low or d == high))


def _closest_of_one_or_two(a: float, digits: str, point: int, bounds: Bounds) -> tuple[str, int]:
    """The spec's choice when one digit suffices: of the decimals of one or two digits that round to
    the value, the closest (on a tie, the one whose last digit is even)."""
    exact = Fraction(a)
    candidates = [(digits, point)]
    mantissa, _, exponent = f"{a:.1e}".partition("e")  # the closest two-digit decimal, and its neighbours
    nearest, place = int(mantissa.replace(".", "")), int(exponent) - 1
    for n in (nearest - 1, nearest, nearest + 1):
        if _within(f"{n}e{place}", bounds):
            candidates.append(_digits(f"{n}e{place}"))

    def rank(candidate: tuple[str, int]) -> tuple[Fraction, int]:
        value = Fraction(int(candidate[0])) * Fraction(10) ** (candidate[1] - len(candidate[0]))
        return abs(value - exact), int(candidate[0][-1]) % 2

    return min(candidates, key=rank)


def _next_up(text: str, precision: int) -> str:
    """The decimal of `precision` digits after the one %e printed (e.g. 1.5e+07 -> 16e6)."""
    mantissa, _, exponent = text.partition("e")
    return f"{int(mantissa.replace('.', '')) + 1}e{int(exponent) - (precision - 1)}"
