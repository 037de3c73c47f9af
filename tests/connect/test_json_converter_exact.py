"""JsonConverter's bytes as Kafka's: the texts below are what Kafka's JsonConverter builds (its
JsonNodeFactory(true) nodes, written by a plain ObjectMapper, connect/json JsonConverter.java and
JsonSerializer.java) as Jackson 2.17.2 on JDK 17 printed them, or quoted from Kafka's
JsonConverterTest."""

import decimal

import pytest

from klog.connect.converters import JsonConverter

DECIMAL = "org.apache.kafka.connect.data.Decimal"


def decimal_schema(scale: int) -> dict:
    return {"type": "bytes", "optional": False, "name": DECIMAL, "version": 1, "parameters": {"scale": str(scale)}}


def big_decimal(unscaled: int, scale: int) -> decimal.Decimal:
    """new BigDecimal(BigInteger.valueOf(unscaled), scale) as a Python Decimal."""
    digits = tuple(int(d) for d in str(abs(unscaled)))
    return decimal.Decimal((int(unscaled < 0), digits, -scale))


# (unscaled, scale) -> Jackson's text for numberNode(new BigDecimal(unscaled, scale)): BigDecimal.toString,
# scientific where the scale is negative or the adjusted exponent below -6 (Jackson 2.17.2, JDK 17)
JACKSON_DECIMALS = [
    (123, 0, "123"), (-123, 0, "-123"), (123, -1, "1.23E+3"), (123, -3, "1.23E+5"), (123, 1, "12.3"),
    (123, 5, "0.00123"), (123, 10, "1.23E-8"), (-123, 12, "-1.23E-10"), (0, 2, "0.00"), (0, -3, "0E+3"),
    (0, 10, "0E-10"), (0, 0, "0"), (15600, 4, "1.5600"), (10, 8, "1.0E-7"), (1, -3, "1E+3"), (1, 7, "1E-7"),
    (1, 6, "0.000001"), (123456789012345678901234567890123456789, 9, "123456789012345678901234567890.123456789"),
    (-5, -20, "-5E+20"), (0, 7, "0E-7"), (0, 6, "0.000000"),
]


@pytest.mark.parametrize(("unscaled", "scale", "text"), JACKSON_DECIMALS)
def test_a_numeric_decimal_is_written_as_jackson_writes_a_big_decimal(unscaled: int, scale: int, text: str) -> None:
    """decimal.format=numeric: Kafka's JSON_NODE_FACTORY.numberNode(decimal), BigDecimal.toString's text.
    klog printed the float nearest it (1.56 for 1.5600, 1000.0 for 1E+3, 1.2345678901234568e+38)."""
    value = big_decimal(unscaled, scale)
    schemaless = JsonConverter({"decimal.format": "numeric", "schemas.enable": "false"}, is_key=False)
    assert schemaless.from_connect("t", decimal_schema(scale), value) == text.encode()
    enveloped = JsonConverter({"decimal.format": "numeric"}, is_key=False)
    data = enveloped.from_connect("t", decimal_schema(scale), value)
    assert data == (b'{"schema":{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal",'
                    b'"version":1,"parameters":{"scale":"' + str(scale).encode() + b'"}},"payload":'
                    + text.encode() + b"}")
    # and read back as the BigDecimal Jackson reads from that text: the same digits and scale
    read = enveloped.to_connect("t", data)[1]
    assert read == value and read.as_tuple() == value.as_tuple()


def test_numeric_decimals_in_a_struct_and_a_negative_zero() -> None:
    schema = {"type": "struct", "fields": [{**decimal_schema(2), "field": "price"},
                                           {"type": "array", "items": decimal_schema(0), "field": "counts"},
                                           {"type": "float64", "optional": False, "field": "rate"}]}
    converter = JsonConverter({"decimal.format": "numeric", "schemas.enable": "false"}, is_key=False)
    value = {"price": decimal.Decimal("-0.00"), "counts": [decimal.Decimal("1E+3"), None], "rate": 0.5}
    # a BigDecimal has no negative zero: Kafka's -0.00 is 0.00
    assert converter.from_connect("t", schema, value) == b'{"price":0.00,"counts":[1E+3,null],"rate":0.5}'


@pytest.mark.parametrize(("payload", "expected"), [
    # Kafka's JsonConverterTest: numericDecimalToConnect, numericDecimalWithTrailingZerosToConnect,
    # highPrecisionNumericDecimalToConnect ("this number is too big to be kept in a float64!")
    ("1.56", big_decimal(156, 2)), ("1.5600", big_decimal(15600, 4)),
    ("1.23456789123456789", decimal.Decimal("1.23456789123456789")),
    # Jackson's decimalValue() of each: 1E+3 scale -3, 1.0E-7 unscaled 10 scale 8, 0E+3, -0.0 as 0.0 (scale 1),
    # 156 an IntNode (scale 0)
    ("1E+3", big_decimal(1, -3)), ("1.0E-7", big_decimal(10, 8)), ("0E+3", big_decimal(0, -3)),
    ("-0.0", big_decimal(0, 1)), ("156", big_decimal(156, 0)), ("1.23E-8", big_decimal(123, 10)),
])
def test_a_numeric_decimal_is_read_as_jackson_reads_it(payload: str, expected: decimal.Decimal) -> None:
    """Kafka's toConnectData: USE_BIG_DECIMAL_FOR_FLOATS, then decimalValue(). klog read a float and made a
    Decimal of its repr: 1.56 for 1.5600, 1000.0 for 1E+3, 1.2345678912345679 for the high-precision one."""
    converter = JsonConverter({}, is_key=False)
    schema_text = ('{"type":"struct","fields":[{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.'
                   'data.Decimal","version":1,"parameters":{"scale":"2"},"field":"n"},'
                   '{"type":"float64","optional":false,"field":"d"}],"optional":false}')
    for envelope in (f'{{"schema":{schema_text},"payload":{{"n":{payload},"d":1.5}}}}',
                     f'{{ "schema": {schema_text}, "payload": {{ "n": {payload}, "d": 1.5 }} }}'):  # the slow path
        value = converter.to_connect("t", envelope.encode())[1]
        assert value["n"].as_tuple() == expected.as_tuple()
        assert type(value["d"]) is float and value["d"] == 1.5  # a float part stays a float
