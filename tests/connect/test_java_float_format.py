"""Floats as Jackson writes them under Kafka's JsonConverter: Java's Double.toString / Float.toString
(the JDK 19+ spec). The tables are Java's outputs from jackson-core's DoubleToStringTest and
FloatToStringTest (the JDK's own cases) and the Double.toString javadoc's examples."""

from __future__ import annotations

import decimal
import json
import math
import random
import struct
from fractions import Fraction

import pytest

from klog.connect import converters
from klog.connect.converters import JsonConverter, StringConverter
from klog.connect.java_numbers import java_double, java_float

DOUBLES = [
    (0.0, "0.0"), (-0.0, "-0.0"), (1.0, "1.0"), (-1.0, "-1.0"), (100.0, "100.0"), (1.0e7, "1.0E7"),
    (9999999.0, "9999999.0"), (9999999.999999998, "9999999.999999998"), (0.001, "0.001"),
    (0.0009999999999999998, "9.999999999999998E-4"), (1.0e-4, "1.0E-4"), (1.0e-5, "1.0E-5"),
    (1.2345678e7, "1.2345678E7"), (1e20, "1.0E20"), (-1.5e-9, "-1.5E-9"), (123.456, "123.456"),
    (5e-324, "4.9E-324"), (1.7976931348623157e308, "1.7976931348623157E308"),
    (2.2250738585072014e-308, "2.2250738585072014E-308"), (-2.109808898695963e16, "-2.109808898695963E16"),
    (4.940656e-318, "4.940656E-318"), (1.18575755e-316, "1.18575755E-316"),
    (2.989102097996e-312, "2.989102097996E-312"), (9.0608011534336e15, "9.0608011534336E15"),
    (4.708356024711512e18, "4.708356024711512E18"), (1.8531501765868567e21, "1.8531501765868567E21"),
    (-3.347727380279489e33, "-3.347727380279489E33"), (1.9430376160308388e16, "1.9430376160308388E16"),
    (-6.9741824662760956e19, "-6.9741824662760956E19"), (4.3816050601147837e18, "4.3816050601147837E18"),
    (math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"),
]


def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


FLOATS = [
    (0.0, "0.0"), (-0.0, "-0.0"), (1.0, "1.0"), (-1.0, "-1.0"), (0.1, "0.1"), (1.0e10, "1.0E10"),
    (f32(0x7F7FFFFF), "3.4028235E38"), (f32(1), "1.4E-45"), (f32(0x00800000), "1.1754944E-38"),
    (1.0e7, "1.0E7"), (9999999.0, "9999999.0"), (0.001, "0.001"), (0.0009999999, "9.999999E-4"),
    (3.3554448e7, "3.355445E7"), (8.999999e9, "9.0E9"), (3.4366717e10, "3.436672E10"),
    (0.33007812, "0.33007812"), (f32(0x5D1502F9), "6.7108864E17"), (f32(0x5D9502F9), "1.3421773E18"),
    (f32(0x5E1502F9), "2.6843546E18"), (4.7223665e21, "4.7223665E21"), (8388608.0, "8388608.0"),
    (1.6777216e7, "1.6777216E7"), (3.3554436e7, "3.3554436E7"), (6.7131496e7, "6.7131496E7"),
    (1.9310392e-38, "1.9310392E-38"), (-2.47e-43, "-2.47E-43"), (1.993244e-38, "1.993244E-38"),
    (4103.9003, "4103.9004"), (5.3399997e9, "5.3399997E9"), (6.0898e-39, "6.0898E-39"),
    (0.0010310042, "0.0010310042"), (2.8823261e17, "2.882326E17"), (f32(0x15AE43FD), "7.038531E-26"),
    (9.2234038e17, "9.223404E17"), (6.7108872e7, "6.710887E7"), (1.0e-44, "9.8E-45"),
    (2.816025e14, "2.816025E14"), (9.223372e18, "9.223372E18"), (1.5846085e29, "1.5846086E29"),
    (1.1811161e19, "1.1811161E19"), (5.368709e18, "5.368709E18"), (4.6143165e18, "4.6143166E18"),
    (0.007812537, "0.007812537"), (1.18697724e20, "1.18697725E20"), (1.00014165e-36, "1.00014165E-36"),
    (200.0, "200.0"), (3.3554432e7, "3.3554432E7"), (0.10000000149011612, "0.1"),
    (math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"),
]


@pytest.mark.parametrize(("value", "java"), DOUBLES)
def test_double_to_string_as_java(value: float, java: str) -> None:
    assert java_double(value) == java


@pytest.mark.parametrize(("value", "java"), FLOATS)
def test_float_to_string_as_java(value: float, java: str) -> None:
    assert java_float(value) == java


def spec_choice(x: float, below: Fraction, above: Fraction, even: bool) -> Fraction:
    """Giulietti's spec taken literally, slowly: of the decimals that round to x, those of the least
    length m (of length 1 or 2 when m is 1), the closest to x; on a tie the even one."""
    exact = Fraction(x)
    low, high = (exact + below) / 2, (exact + above) / 2

    def within(d: Fraction) -> bool:
        return low < d < high or (even and (d == low or d == high))

    top = math.floor(math.log10(x))
    found: list[tuple[int, int]] = []  # (c, q) for c x 10^q
    for n in range(1, 19):
        for q in range(top - n, top - n + 3):
            unit = Fraction(10) ** q
            for c in range(max(10 ** (n - 1), math.ceil(low / unit)), min(10**n - 1, math.floor(high / unit)) + 1):
                if within(c * unit):
                    found.append((c, q))
        if found and n >= 2:  # found at length 1: the two-digit ones compete too
            break

    def rank(cq: tuple[int, int]) -> tuple[Fraction, bool]:
        return abs(cq[0] * Fraction(10) ** cq[1] - exact), str(cq[0]).rstrip("0")[-1] in "13579"

    c, q = min(found, key=rank)
    return c * Fraction(10) ** q


def double_neighbours(x: float) -> tuple[Fraction, Fraction, bool]:
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    above = math.nextafter(x, math.inf)
    return (Fraction(math.nextafter(x, 0.0)), Fraction(2) ** 1024 if math.isinf(above) else Fraction(above),
            bits & 1 == 0)


def float_neighbours(x: float) -> tuple[Fraction, Fraction, bool]:
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    above = Fraction(2) ** 128 if bits == 0x7F7FFFFF else Fraction(f32(bits + 1))
    return Fraction(f32(bits - 1)), above, bits & 1 == 0


def samples(rng: random.Random, width: int, count: int) -> list[int]:
    patterns = [rng.getrandbits(width) for _ in range(count)]
    patterns += list(range(1, 120))  # subnormals of a few bits, where one digit may give way to two
    significand = 52 if width == 64 else 23
    step = 1 if width == 32 else 7  # powers of two: the gap below half the one above
    patterns += [k << significand for k in range(1, 2 ** (width - 1 - significand) - 1, step)]
    return patterns


def test_doubles_agree_with_the_spec_taken_literally() -> None:
    rng = random.Random(7)
    for bits in samples(rng, 64, 600):
        x = abs(struct.unpack("<d", struct.pack("<Q", bits))[0])
        if not math.isfinite(x) or x == 0.0:
            continue
        assert Fraction(java_double(x)) == spec_choice(x, *double_neighbours(x)), (bits, x)


def test_floats_agree_with_the_spec_taken_literally() -> None:
    rng = random.Random(7)
    for bits in samples(rng, 32, 1500):
        x = abs(f32(bits & 0x7FFFFFFF))
        if not math.isfinite(x) or x == 0.0:
            continue
        java = java_float(x)
        assert Fraction(java) == spec_choice(x, *float_neighbours(x)), (bits, x)
        read = float(java)  # a double read from the text (a database's real) prints it again
        if struct.unpack("<f", struct.pack("<f", read))[0] == x:  # (not where the double sits half-way)
            assert java_float(read) == java, (bits, x)


def test_floats_read_from_short_decimals_agree_with_the_spec() -> None:
    """A real column's value as a database prints it (its shortest digits), read as a double."""
    rng = random.Random(11)
    for _ in range(1500):
        read = float(f"{rng.uniform(1, 9.99):.{rng.randint(1, 7)}f}e{rng.randint(-40, 38)}")
        x = struct.unpack("<f", struct.pack("<f", read))[0] if read < 3.4e38 else 0.0
        if x and math.isfinite(x):
            assert Fraction(java_float(read)) == spec_choice(x, *float_neighbours(x)), read


def test_json_converter_writes_floats_as_jackson_schemaless() -> None:
    converter = JsonConverter({"schemas.enable": "false"}, is_key=False)
    value = {"big": 1e20, "small": [1e-5, 0.5, math.nan], "text": "1e+20 stays", "n": 12345678.0, "i": 10**8,
             "neg": -math.inf, "nested": {"x": 0.0001}}
    assert converter.from_connect("t", None, value) == (
        b'{"big":1.0E20,"small":[1.0E-5,0.5,"NaN"],"text":"1e+20 stays","n":1.2345678E7,"i":100000000,'
        b'"neg":"-Infinity","nested":{"x":1.0E-4}}')
    assert converter.from_connect("t", None, 1e-7) == b"1.0E-7"
    assert value["big"] == 1e20 and value["nested"]["x"] == 0.0001  # the caller's value untouched


def test_json_converter_writes_floats_as_jackson_with_schemas() -> None:
    schema = {"type": "struct", "fields": [
        {"field": "f", "type": "float32", "optional": True, "default": 0.10000000149011612},
        {"field": "d", "type": "float64", "optional": True, "default": 1e20},
        {"field": "a", "type": "array", "items": {"type": "float32", "optional": True}},
        {"field": "m", "type": "map", "keys": {"type": "string"}, "values": {"type": "float64"}},
        {"field": "n", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "1"}}]}
    converter = JsonConverter({"decimal.format": "numeric"}, is_key=False)
    value = {"f": 0.10000000149011612, "d": 1e7, "a": [1e10, 3.4028234663852886e38, None], "m": {"k": 1e-4},
             "n": decimal.Decimal("12345678.5")}
    data = converter.from_connect("t", schema, value)
    assert data.endswith(b'"payload":{"f":0.1,"d":1.0E7,"a":[1.0E10,3.4028235E38,null],"m":{"k":1.0E-4},'
                         b'"n":12345678.5}}')  # a numeric decimal as before: as Python prints it
    assert b'"default":0.1,"field":"f"}' in data and b'"default":1.0E20,"field":"d"}' in data
    # reading Java's exponents back
    read_schema, read = converter.to_connect("t", data)
    assert read["d"] == 1e7 and read["a"][:2] == [1e10, 3.4028235e38] and read["m"] == {"k": 1e-4}
    assert converter.to_connect("t", b'{"schema":{"type":"float64"},"payload":1.0E20}') == ({"type": "float64"}, 1e20)
    schemaless = JsonConverter({"schemas.enable": "false"}, is_key=False)
    assert schemaless.to_connect("t", b'{"x":1.0E-5,"y":-4.9E-324}')[1] == {"x": 1e-5, "y": -5e-324}


def test_a_payload_holding_the_stand_in_digits_is_still_written_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(converters, "_SENTINEL", 4242424242424242424242424)
    converter = JsonConverter({"schemas.enable": "false"}, is_key=False)
    value = {"s": "4242424242424242424242424", "d": 1e20, "i": 4242424242424242424242424}
    assert json.loads(converter.from_connect("t", None, value)) == value
    assert b'"d":1.0E20' in converter.from_connect("t", None, value)


def test_string_converter_prints_a_float_as_java() -> None:
    """Kafka's StringConverter writes value.toString(): Double's or Float's."""
    converter = StringConverter({}, is_key=False)
    assert converter.from_connect("t", {"type": "float64"}, 1e20) == b"1.0E20"
    assert converter.from_connect("t", {"type": "float32"}, 0.10000000149011612) == b"0.1"
    assert converter.from_connect("t", None, 0.5) == b"0.5"
    assert converter.from_connect("t", None, math.nan) == b"NaN"


def test_a_whole_number_in_a_float_field_is_written_as_the_double_it_stands_for() -> None:
    """Kafka's JsonConverter holds a FLOAT64 as a Double (5 prints as 5.0); a schemaless 5 stays 5."""
    schema = {"type": "struct", "fields": [{"field": "d", "type": "float64"}, {"field": "f", "type": "float32"},
                                           {"field": "i", "type": "int64"}]}
    converter = JsonConverter({}, is_key=False)
    assert converter.from_connect("t", schema, {"d": 5, "f": 3, "i": 7}).endswith(
        b'"payload":{"d":5.0,"f":3.0,"i":7}}')
    assert converter.from_connect("t", {"type": "float64"}, 10**8).endswith(b'"payload":1.0E8}')
    assert JsonConverter({"schemas.enable": "false"}, is_key=False).from_connect("t", None, {"n": 5}) == b'{"n":5}'
    strings = StringConverter({}, is_key=False)
    assert strings.from_connect("t", {"type": "float64"}, 5) == b"5.0" and strings.from_connect("t", None, 5) == b"5"
