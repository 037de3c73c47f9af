"""Protobuf schemas as Confluent's Schema Registry holds them: `.proto` text parsed into a small model
(the elements of Square Wire's ProtoFileElement, which Confluent's ProtobufSchema parses into), written
back as Confluent's canonical text (the rules of its ProtobufSchemaUtils.toString), and converted to and
from a FileDescriptorProto (the "serialized" form confluent-kafka's ProtobufSerializer registers and its
ProtobufDeserializer reads, as base64). Our own code, after the rules of those classes.

Kept: syntax (proto2, proto3), package, imports (public, weak), options (plain, parenthesized custom ones
with scalar or aggregate values), messages (nested), fields (labels, maps, defaults, json_name, options),
oneofs, enums, reserved, extensions ranges, `extend` blocks (custom options' declarations), services.
Refused (ProtoError, a 42201): groups, editions, and anything malformed, each with its line.

The model's type names are as written (`Timestamp`, `.google.protobuf.Timestamp`, `map<string, int32>`);
resolve() gives each its full name against the file's imports, as protoc does, for the descriptor.
Custom options are not put in the descriptor (their extensions would need resolving): its canonical text
keeps them, the serialized form does not.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 32  # nested messages, aggregate option values: deeper is refused, not recursed into
MAX_TAG = 536_870_911
TAGS = (1, MAX_TAG)  # a message's field, reserved and extension numbers
INT32 = (-2**31, 2**31 - 1)  # an enum's values and reserved numbers
SCALARS = ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
           "sfixed32", "sfixed64", "bool", "string", "bytes")
MAP_KEYS = ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32", "sfixed64",
            "bool", "string")


class ProtoError(ValueError):
    """A .proto text or descriptor klog cannot take: the message names the line and what was wrong."""


# -- the model -------------------------------------------------------------------------------------------
@dataclass
class Option:
    name: str  # as written: java_package, (my.opt), (my.opt).sub
    value: Any  # str for a string, Raw for a number / bool / enum word, dict or list for an aggregate


class Raw(str):
    """An option value written without quotes (a number, true/false, an enum constant)."""


@dataclass
class Field:
    name: str
    number: int
    type: str  # as written; a map is "map<K, V>"
    label: str | None = None  # optional, required, repeated, or None (proto3 singular, a oneof's, a map)
    options: list[Option] = field(default_factory=list)
    default: str | None = None
    json_name: str | None = None


@dataclass
class OneOf:
    name: str
    fields: list[Field] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)


@dataclass
class EnumConstant:
    name: str
    number: int
    options: list[Option] = field(default_factory=list)


@dataclass
class Enum:
    name: str
    constants: list[EnumConstant] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    reserved: list[list[Any]] = field(default_factory=list)  # statements of int, (start, end) inclusive, name


@dataclass
class Extend:
    name: str  # the extended message, as written
    fields: list[Field] = field(default_factory=list)


@dataclass
class Message:
    name: str
    fields: list[Field] = field(default_factory=list)
    oneofs: list[OneOf] = field(default_factory=list)
    nested: list[Message | Enum] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    reserved: list[list[Any]] = field(default_factory=list)
    extensions: list[list[Any]] = field(default_factory=list)  # statements of int or (start, end)
    extends: list[Extend] = field(default_factory=list)

    def all_fields(self) -> list[Field]:
        return self.fields + [f for o in self.oneofs for f in o.fields]


@dataclass
class Rpc:
    name: str
    request: str
    response: str
    request_stream: bool = False
    response_stream: bool = False
    options: list[Option] = field(default_factory=list)


@dataclass
class Service:
    name: str
    rpcs: list[Rpc] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)


@dataclass
class ProtoFile:
    syntax: str | None = None
    package: str | None = None
    imports: list[str] = field(default_factory=list)
    public_imports: list[str] = field(default_factory=list)
    weak_imports: list[str] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    types: list[Message | Enum] = field(default_factory=list)
    extends: list[Extend] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)

    @property
    def proto3(self) -> bool:
        return self.syntax == "proto3"

    def dependencies(self) -> list[str]:
        return self.imports + self.public_imports + self.weak_imports


# -- the tokenizer ---------------------------------------------------------------------------------------
MAX_TOKENS = 200_000  # ~20 times Google's descriptor.proto; a longer text is refused (its parse would be ~5 s)
MAX_ELEMENTS = 50_000  # the same for a serialized schema: its messages, fields, enums and enum values
# one token with the whitespace and comments before it
_TOKEN = re.compile(r"""
    (?P<skip>(?>(?:[ \t\r\f\v\n]+|//[^\n]*|/\*.*?\*/)*))  # atomic: never split again (exponential)
    (?: (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<number>(?:0[xX][0-9a-fA-F]+|[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?))
      | (?P<word>\.?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
      | (?P<symbol>[{}\[\]()<>=;,:\-+.])
      | (?P<end>\Z))
""", re.VERBOSE | re.DOTALL)


@dataclass
class Token:
    kind: str  # string, number, word, symbol
    text: str  # a string's value unescaped; a word without inner spaces
    line: int


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'",
            '"': '"', "?": "?"}


_HEX_ESCAPE = re.compile(r"[0-9a-fA-F]{1,2}")
_OCTAL_ESCAPE = re.compile(r"[0-7]{1,3}")
_UNICODE_ESCAPE = re.compile(r"[0-9a-fA-F]{4}")
_LONG_UNICODE_ESCAPE = re.compile(r"[0-9a-fA-F]{8}")


def _unescape(body: str, line: int) -> str:
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "xX" and (m := _HEX_ESCAPE.match(body, i + 2)):  # matched in place: a slice of the rest at
            out.append(chr(int(m.group(), 16)))                         # each escape was quadratic
            i = m.end()
        elif m := _OCTAL_ESCAPE.match(body, i + 1):
            out.append(chr(int(m.group(), 8)))
            i = m.end()
        elif nxt in "uU" and (m := (_UNICODE_ESCAPE if nxt == "u" else _LONG_UNICODE_ESCAPE).match(body, i + 2)):
            out.append(_code_point(int(m.group(), 16), line))  # protoc's Unicode escapes
            i = m.end()
        else:
            raise ProtoError(f"line {line}: unknown escape \\{nxt} in a string")
    text = "".join(out)
    if any("\ud800" <= c <= "\udfff" for c in text):  # a \uD83D\uDE00 pair is one character, as protoc
        try:  # reads it; a lone half is no character (nor UTF-8)
            text = text.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:
            raise ProtoError(f"line {line}: a string has half a UTF-16 surrogate pair") from None
    return text


def _code_point(value: int, line: int) -> str:
    if value > 0x10FFFF:
        raise ProtoError(f"line {line}: \\U{value:08x} is not a Unicode character")
    return chr(value)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    more: dict[int, list[str]] = {}  # a string token's later pieces ("a" "b"), joined at the end: linear
    line, pos, read = 1, 0, 0
    while True:
        m = _TOKEN.match(text, pos)
        if m is None:  # what follows the whitespace is no token
            line += text.count("\n", pos, pos + len(_TOKEN_SKIP.match(text, pos).group()))
            pos += len(_TOKEN_SKIP.match(text, pos).group())
            if text.startswith("/*", pos):
                raise ProtoError(f"line {line}: a comment /* is not closed")
            quote = text[pos] in "\"'"
            raise ProtoError(f"line {line}: " + ("a string is not closed on its line" if quote else
                                                 f"unexpected character {text[pos]!r}"))
        line += text.count("\n", pos, m.end("skip"))
        kind, value = m.lastgroup or "", m.group(m.lastgroup or 0)
        if kind == "end":
            for at, pieces in more.items():
                tokens[at].text += "".join(pieces)
            return tokens
        if kind == "string" and tokens and tokens[-1].kind == "string":  # "a" "b" is one string, as protoc
            more.setdefault(len(tokens) - 1, []).append(_unescape(value[1:-1], line))  # reads it
        elif kind == "string":
            tokens.append(Token("string", _unescape(value[1:-1], line), line))
        else:
            tokens.append(Token(kind, value, line))
        read += 1
        if read > MAX_TOKENS:
            raise ProtoError(f"line {line}: the schema is longer than {MAX_TOKENS} tokens")
        line += value.count("\n")
        pos = m.end()


_TOKEN_SKIP = re.compile(r"(?>(?:[ \t\r\f\v\n]+|//[^\n]*|/\*.*?\*/)*)", re.DOTALL)


# -- the parser ------------------------------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str, strict: bool = True) -> None:
        self.strict = strict
        self.tokens = tokenize(text)
        self.at = 0
        self.depth = 0
        self.imported: set[str] = set()

    # reading tokens
    def peek(self, ahead: int = 0) -> Token | None:
        i = self.at + ahead
        return self.tokens[i] if i < len(self.tokens) else None

    def line(self) -> int:
        token = self.peek() or (self.tokens[-1] if self.tokens else None)
        return token.line if token else 1

    def fail(self, what: str) -> ProtoError:
        return ProtoError(f"line {self.line()}: {what}")

    def next(self, expected: str = "more text") -> Token:
        token = self.peek()
        if token is None:
            raise self.fail(f"the text ends where {expected} was expected")
        self.at += 1
        return token

    def is_symbol(self, symbol: str) -> bool:
        token = self.peek()
        return token is not None and token.kind == "symbol" and token.text == symbol

    def accept(self, symbol: str) -> bool:
        if self.is_symbol(symbol):
            self.at += 1
            return True
        return False

    def expect(self, symbol: str) -> None:
        token = self.next(f"'{symbol}'")
        if token.kind != "symbol" or token.text != symbol:
            self.at -= 1
            raise self.fail(f"expected '{symbol}', found {token.text!r}")

    def word(self, what: str) -> str:
        token = self.next(what)
        if token.kind != "word":
            self.at -= 1
            raise self.fail(f"expected {what}, found {token.text!r}")
        return token.text

    def name(self, what: str) -> str:
        text = self.word(what)
        if "." in text:
            self.at -= 1
            raise self.fail(f"{what} {text!r} may not contain a dot")
        return text

    def string(self, what: str) -> str:
        token = self.next(what)
        if token.kind != "string":
            self.at -= 1
            raise self.fail(f"expected {what} (a quoted string), found {token.text!r}")
        return token.text

    def integer(self, what: str) -> int:
        negative = self.accept("-")
        token = self.next(what)
        if token.kind != "number" or not re.fullmatch(r"0[xX][0-9a-fA-F]+|[0-9]+", token.text):
            self.at -= 1
            raise self.fail(f"expected {what} (a whole number), found {token.text!r}")
        value = int(token.text, 16) if token.text[:2] in ("0x", "0X") else \
            int(token.text, 8) if len(token.text) > 1 and token.text[0] == "0" else int(token.text)
        return -value if negative else value

    def bounded(self, number: int, what: str, bounds: tuple[int, int]) -> int:
        if not bounds[0] <= number <= bounds[1]:
            self.at -= 1
            raise self.fail(f"{what} number {number} is out of range ({bounds[0]}..{bounds[1]})")
        return number

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")

    # the file
    def file(self) -> ProtoFile:
        out = ProtoFile()
        if self.peek() is not None and self.peek().text == "syntax":  # type: ignore[union-attr]
            self.next()
            self.expect("=")
            out.syntax = self.string("the syntax")
            if out.syntax not in ("proto2", "proto3"):
                raise ProtoError(f"line {self.line()}: syntax {out.syntax!r} is not proto2 or proto3")
            self.expect(";")
        while self.peek() is not None:
            self.top_level(out)
        return out

    def top_level(self, out: ProtoFile) -> None:
        token = self.next()
        if token.kind == "symbol" and token.text == ";":
            return
        keyword = token.text if token.kind == "word" else ""
        if keyword == "package":
            if out.package is not None:
                raise ProtoError(f"line {token.line}: a second package statement")
            out.package = self.word("a package name").lstrip(".")
            self.expect(";")
        elif keyword == "import":
            kind = self.peek()
            target = out.imports
            if kind is not None and kind.kind == "word" and kind.text in ("public", "weak"):
                self.next()
                target = out.public_imports if kind.text == "public" else out.weak_imports
            imported = self.string("the imported file's name")
            if imported in self.imported and self.strict:
                raise ProtoError(f"line {token.line}: {imported!r} is imported twice")
            self.imported.add(imported)
            target.append(imported)
            self.expect(";")
        elif keyword == "option":
            out.options.append(self.option_statement())
        elif keyword == "message":
            out.types.append(self.message(out.proto3))
        elif keyword == "enum":
            out.types.append(self.enum())
        elif keyword == "service":
            out.services.append(self.service())
        elif keyword in ("syntax", "edition"):
            raise ProtoError(f"line {token.line}: '{keyword}' must be the file's first statement"
                             if keyword == "syntax" else f"line {token.line}: editions are not supported")
        elif keyword == "extend":
            out.extends.append(self.extend(out.proto3))
        else:
            raise ProtoError(f"line {token.line}: unexpected {token.text!r} (expected message, enum, service, "
                             "import, package or option)")

    # options
    def option_statement(self) -> Option:
        option = self.option_assignment()
        self.expect(";")
        return option

    def option_name(self) -> str:
        parts = []
        while True:
            if self.accept("("):
                parts.append("(" + self.word("an option name") + ")")
                self.expect(")")
            else:
                parts.append(self.word("an option name"))
            token = self.peek()
            if token is not None and token.kind == "word" and token.text.startswith("."):
                parts.append(self.next().text)  # (a).b reads as "(a)" then ".b"
                token = self.peek()
            if not self.accept("."):
                break
            parts.append(".")
        return "".join(parts)

    def option_assignment(self) -> Option:
        name = self.option_name()
        self.expect("=")
        return Option(name, self.option_value())

    def option_value(self) -> Any:
        if self.is_symbol("{") or self.is_symbol("<"):
            return self.aggregate()
        if self.is_symbol("["):
            return self.value_list()
        token = self.next("an option value")
        if token.kind == "string":
            return token.text
        if token.kind == "symbol" and token.text in "-+":
            number = self.next("a number")
            if number.kind not in ("number", "word"):
                raise self.fail(f"expected a number after '{token.text}', found {number.text!r}")
            return Raw(("-" if token.text == "-" else "") + number.text)
        if token.kind in ("number", "word"):
            return Raw(token.text)
        self.at -= 1
        raise self.fail(f"expected an option value, found {token.text!r}")

    def aggregate(self) -> dict[str, Any]:
        """A message value in text format: `{ a: 1 b { c: 2 } }`, or between < and > as protoc also reads it."""
        self.enter()
        close = ">" if self.accept("<") else "}"
        if close == "}":
            self.expect("{")
        out: dict[str, Any] = {}
        while not self.accept(close):
            if self.accept("["):
                key = "[" + self.word("an extension name") + "]"
                self.expect("]")
            else:
                key = self.name("a field name")
            colon = self.accept(":")
            if self.is_symbol("["):
                value: Any = self.value_list()
            elif self.is_symbol("{") or self.is_symbol("<"):
                value = self.aggregate()
            else:
                if not colon:
                    raise self.fail(f"expected ':' after {key!r}")
                value = self.option_value()
            if key in out:  # a repeated key is a list, as Wire reads it (extended in place: copied at each
                before = out[key]  # repeat, 60,000 repeats took 24 s)
                if not isinstance(before, list):
                    before = out[key] = [before]
                before.extend(value if isinstance(value, list) else [value])
            else:
                out[key] = value
            if not self.accept(","):
                self.accept(";")
        self.depth -= 1
        return out

    def value_list(self) -> list[Any]:
        self.enter()
        self.expect("[")
        out: list[Any] = []
        while not self.accept("]"):
            out.append(self.option_value())
            if not self.accept(","):
                self.expect("]")
                break
        self.depth -= 1
        return out

    def bracket_options(self) -> list[Option]:
        options: list[Option] = []
        if self.accept("["):
            while True:
                options.append(self.option_assignment())
                if self.accept("]"):
                    break
                self.expect(",")
        return options

    # messages
    def message(self, proto3: bool) -> Message:
        self.enter()
        out = Message(self.name("a message name"))
        self.expect("{")
        while not self.accept("}"):
            self.message_item(out, proto3)
        self.depth -= 1
        return out

    def message_item(self, out: Message, proto3: bool) -> None:
        token = self.peek()
        if token is None:
            raise self.fail(f"message {out.name} is not closed (no '}}')")
        if token.kind == "symbol" and token.text == ";":
            self.next()
            return
        keyword = token.text if token.kind == "word" else ""
        if keyword == "message" and self._starts_declaration():
            self.next()
            out.nested.append(self.message(proto3))
        elif keyword == "enum" and self._starts_declaration():
            self.next()
            out.nested.append(self.enum())
        elif keyword == "option":
            self.next()
            out.options.append(self.option_statement())
        elif keyword == "oneof" and self._starts_declaration():
            self.next()
            out.oneofs.append(self.oneof(proto3))
        elif keyword == "reserved" and not self._is_field_named():
            self.next()
            out.reserved.append(self.ranges("reserved", TAGS, names=True))
        elif keyword == "extensions" and not self._is_field_named():
            if proto3 and self.strict:
                raise self.fail(f"message {out.name}: proto3 has no extensions ranges")
            self.next()
            out.extensions.append(self.ranges("extensions", TAGS, names=False))
            self.bracket_options()  # extension range options: dropped with the ranges' declarations
            self.expect(";")
        elif keyword == "extend" and self._starts_declaration():
            self.next()
            out.extends.append(self.extend(proto3))
        else:
            out.fields.append(self.field(proto3, in_oneof=False))

    def _starts_declaration(self) -> bool:
        """`message Foo {` declares; `message foo = 1;` is a field of type message (a legal, odd name)."""
        after = self.peek(2)
        return after is not None and after.kind == "symbol" and after.text == "{"

    def _is_field_named(self) -> bool:
        after = self.peek(2)
        return after is not None and after.kind == "symbol" and after.text == "="

    def _is_constant_named(self) -> bool:
        after = self.peek(1)
        return after is not None and after.kind == "symbol" and after.text == "="

    def field(self, proto3: bool, in_oneof: bool) -> Field:
        line = self.line()
        label = None
        token = self.peek()
        if token is not None and token.kind == "word" and token.text in ("optional", "required", "repeated") \
                and not self._is_field_named():
            label = self.next().text
            if in_oneof:
                raise ProtoError(f"line {line}: a oneof's field has no label ({label})")
            if proto3 and label == "required":
                raise ProtoError(f"line {line}: proto3 has no required fields")
        if self.peek() is not None and self.peek().text == "group":  # type: ignore[union-attr]
            raise ProtoError(f"line {line}: groups are not supported by klog's registry")
        kind = self.field_type()
        if kind.startswith("map<"):
            if label is not None or in_oneof:
                raise ProtoError(f"line {line}: a map field has no label and is in no oneof")
        elif label is None and not proto3 and not in_oneof:
            raise ProtoError(f"line {line}: a proto2 field needs a label (optional, required or repeated)")
        name = self.name("a field name")
        self.expect("=")
        number = self.integer("the field's number")
        if not 1 <= number <= MAX_TAG or 19000 <= number <= 19999:
            raise ProtoError(f"line {line}: field number {number} of {name} is out of range (1..{MAX_TAG}, "
                             "not 19000..19999)")
        out = Field(name, number, kind, label)
        for option in self.bracket_options():
            if option.name == "default":
                out.default = str(option.value)
            elif option.name == "json_name":
                out.json_name = str(option.value)
            else:
                out.options.append(option)
        self.expect(";")
        return out

    def field_type(self) -> str:
        token = self.next("a field type")
        if token.kind != "word":
            self.at -= 1
            raise self.fail(f"expected a field type, found {token.text!r}")
        if token.text != "map" or not self.is_symbol("<"):
            return token.text
        self.expect("<")
        key = self.word("a map's key type")
        if key not in MAP_KEYS:
            raise self.fail(f"{key!r} cannot be a map's key type")
        self.expect(",")
        value = self.word("a map's value type")
        if value == "map":
            raise self.fail("a map's value cannot be a map")
        self.expect(">")
        return f"map<{key}, {value}>"

    def extend(self, proto3: bool) -> Extend:
        out = Extend(self.word("the extended message's name"))
        self.expect("{")
        while not self.accept("}"):
            if self.peek() is None:
                raise self.fail(f"extend {out.name} is not closed")
            if not self.accept(";"):
                out.fields.append(self.field(proto3, in_oneof=False))
        return out

    def oneof(self, proto3: bool) -> OneOf:
        out = OneOf(self.name("a oneof name"))
        self.expect("{")
        while not self.accept("}"):
            token = self.peek()
            if token is None:
                raise self.fail(f"oneof {out.name} is not closed")
            if token.kind == "symbol" and token.text == ";":
                self.next()
            elif token.text == "option":
                self.next()
                out.options.append(self.option_statement())
            else:
                out.fields.append(self.field(proto3, in_oneof=True))
        return out

    def ranges(self, what: str, bounds: tuple[int, int], names: bool) -> list[Any]:
        """A reserved or extensions statement's values: numbers within `bounds` (protoc refuses others; a
        descriptor cannot hold them), ranges, and (reserved) quoted names."""
        out: list[Any] = []
        while True:
            token = self.peek()
            if names and token is not None and token.kind == "string":
                # refused as protoc refuses it (the canonical text writes a reserved name raw)
                if self.strict and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token.text):
                    raise self.fail(f"reserved name {token.text!r} is not a name")
                out.append(self.next().text)
            else:
                start = self.bounded(self.integer(f"a {what} number"), what, bounds)
                token = self.peek()
                if token is not None and token.kind == "word" and token.text == "to":
                    self.next()
                    token = self.peek()
                    if token is not None and token.kind == "word" and token.text == "max":
                        self.next()
                        end = MAX_TAG
                    else:
                        end = self.bounded(self.integer(f"the end of a {what} range"), what, bounds)
                    if end < start:
                        raise self.fail(f"{what} range {start} to {end} ends before it starts")
                    out.append((start, end))
                else:
                    out.append(start)
            if not self.accept(","):
                break
        if what == "reserved":
            self.expect(";")
        return out

    # enums and services
    def enum(self) -> Enum:
        out = Enum(self.name("an enum name"))
        self.expect("{")
        while not self.accept("}"):
            token = self.peek()
            if token is None:
                raise self.fail(f"enum {out.name} is not closed")
            if token.kind == "symbol" and token.text == ";":
                self.next()
            elif token.text == "option" and not self._is_constant_named():
                self.next()
                out.options.append(self.option_statement())
            elif token.text == "reserved" and not self._is_constant_named():
                self.next()
                out.reserved.append(self.ranges("reserved", INT32, names=True))
            else:
                name = self.name("an enum constant")
                self.expect("=")
                number = self.bounded(self.integer("the constant's number"), "enum value", INT32)
                constant = EnumConstant(name, number, self.bracket_options())
                self.expect(";")
                out.constants.append(constant)
        if not out.constants:
            raise self.fail(f"enum {out.name} has no constants")
        return out

    def service(self) -> Service:
        out = Service(self.name("a service name"))
        self.expect("{")
        while not self.accept("}"):
            keyword = self.word("rpc or option")
            if keyword == "option":
                out.options.append(self.option_statement())
            elif keyword == "rpc":
                out.rpcs.append(self.rpc())
            else:
                raise self.fail(f"unexpected {keyword!r} in service {out.name}")
        return out

    def rpc(self) -> Rpc:
        name = self.name("an rpc name")
        request, request_stream = self.rpc_type()
        if self.word("returns") != "returns":
            raise self.fail("expected 'returns'")
        response, response_stream = self.rpc_type()
        out = Rpc(name, request, response, request_stream, response_stream)
        if self.accept("{"):
            while not self.accept("}"):
                if self.accept(";"):
                    continue
                if self.word("option") != "option":
                    raise self.fail("expected 'option' in an rpc's body")
                out.options.append(self.option_statement())
            self.accept(";")
        else:
            self.expect(";")
        return out

    def rpc_type(self) -> tuple[str, bool]:
        self.expect("(")
        kind = self.word("a message type")
        stream = kind == "stream" and not self.is_symbol(")")
        if stream:
            kind = self.word("a message type")
        self.expect(")")
        return kind, stream


def parse_text(text: str, strict: bool = True) -> ProtoFile:
    """A .proto file's text parsed (ProtoError naming the line of what is wrong). Not `strict` (a stored
    version, which Confluent's registry may have taken): only what no descriptor can hold is refused, not what
    protoc refuses past that (a reserved number used, a file imported twice, ...)."""
    out = _Parser(text, strict).file()
    _check_numbers(out.types, "", strict)
    return out


def _check_numbers(types: list[Message | Enum], where: str = "", strict: bool = True) -> None:
    """What protoc refuses and a client's descriptor pool would: two fields with one number or name, two
    types with one name in a scope; and (`strict`) what protoc refuses past the pool's checks: a field named
    as another symbol of its message, a reserved number or name used, an extension range over a field, an
    enum number twice without allow_alias."""
    declared: set[str] = set()
    for t in types:
        if t.name in declared:
            raise ProtoError(f"{where + t.name} is declared twice")
        declared.add(t.name)
    for t in types:
        full = where + t.name
        if isinstance(t, Enum):
            if strict:
                _check_enum(t, full)
            continue
        seen: dict[int, str] = {}
        reserved, extensions = _Taken(t.reserved), _Taken(t.extensions)
        for f in t.all_fields():
            if f.number in seen:
                raise ProtoError(f"fields {seen[f.number]} and {f.name} of {full} have the same number {f.number}")
            seen[f.number] = f.name
            if not strict:
                continue
            reserved.check(f.name, f.number, f"field {f.name} of {full}")
            if extensions.covers(f.number):
                raise ProtoError(f"field {f.name} of {full}: its number {f.number} is in an extensions range")
        symbols = [f.name for f in t.all_fields()]
        if strict:  # an enum's values are its siblings, as in C++
            symbols += [o.name for o in t.oneofs] + [n.name for n in t.nested] + \
                [c.name for n in t.nested if isinstance(n, Enum) for c in n.constants]
        names: set[str] = set()
        for name in symbols:
            if name in names:
                raise ProtoError(f"{full}.{name} is declared twice (fields, oneofs, nested types and nested "
                                 "enums' values share one scope)")
            names.add(name)
        _check_numbers(t.nested, full + ".", strict)


class _Taken:
    """The names and numbers of reserved (or extensions) statements, each number looked up in log time (a
    hostile file has as many of them as fields)."""

    def __init__(self, statements: list[list[Any]]) -> None:
        values = [v for statement in statements for v in statement]
        self.names = {v for v in values if isinstance(v, str)}
        self.spans: list[tuple[int, int]] = []
        for start, end in sorted(v if isinstance(v, tuple) else (v, v) for v in values if not isinstance(v, str)):
            if self.spans and start <= self.spans[-1][1]:
                self.spans[-1] = (self.spans[-1][0], max(end, self.spans[-1][1]))
            else:
                self.spans.append((start, end))

    def covers(self, number: int) -> bool:
        at = bisect.bisect_right(self.spans, (number, math.inf)) - 1
        return at >= 0 and self.spans[at][1] >= number

    def check(self, name: str, number: int, what: str) -> None:
        if name in self.names:
            raise ProtoError(f"{what}: its name is reserved")
        if self.covers(number):
            raise ProtoError(f"{what}: its number {number} is reserved")


def _check_enum(e: Enum, full: str) -> None:
    aliased = any(o.name == "allow_alias" and str(o.value) == "true" for o in e.options)
    seen: dict[int, str] = {}
    reserved = _Taken(e.reserved)
    for c in e.constants:
        if c.number in seen and not aliased:
            raise ProtoError(f"enum {full}: {c.name} has the number of {seen[c.number]} ({c.number}) and the enum "
                             "has no option allow_alias = true")
        seen.setdefault(c.number, c.name)
        reserved.check(c.name, c.number, f"enum value {c.name} of {full}")


# -- the canonical text ----------------------------------------------------------------------------------
def _escape(text: str) -> str:
    table = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
             "\\": "\\\\", "'": "\\'", '"': '\\"'}
    return "".join(table.get(c, c) for c in text)


def _indent(text: str) -> str:
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return "".join("  " + line + "\n" for line in lines)


def _value(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, str):
        return '"' + _escape(value) + '"'
    if isinstance(value, dict):
        return "{\n" + _entries(value) + "}"
    if isinstance(value, list):
        return "[\n" + "".join(_indent(_value(v) + ("," if i < len(value) - 1 else "")) for i, v in
                               enumerate(value)) + "]"
    return str(value)


def _entries(values: dict[str, Any]) -> str:
    last = len(values) - 1
    return "".join(_indent(f"{k}: {_value(v)}" + ("," if i != last else "")) for i, (k, v) in
                   enumerate(values.items()))


def _option(option: Option) -> str:
    if isinstance(option.value, list):  # a list: one value on its line, more one a line (appendOptions)
        return f"{option.name} = {_listed(option.value)}"
    return f"{option.name} = {_value(option.value)}"


def _listed(values: list[Any]) -> str:
    if len(values) == 1:
        return "[" + _value(values[0]) + "]"
    return "[\n" + "".join(_indent(_value(v) + ("," if i < len(values) - 1 else "")) for i, v in
                           enumerate(values)) + "]"


def _options_list(options: list[Option]) -> str:
    return _listed([Raw(_option(o)) for o in options])


def _option_statement(option: Option) -> str:
    return f"option {_option(option)};\n"


def _range(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return f"{value[0]} to {value[1] if value[1] < MAX_TAG else 'max'}"
    return str(value)


def _ranges(keyword: str, statements: list[list[Any]]) -> str:
    return "".join(_indent(f"{keyword} {', '.join(_range(v) for v in values)};\n") for values in statements)


def _extend_text(e: Extend) -> str:
    return f"extend {e.name} {{" + ("\n" + "".join(_indent(_field_text(f)) for f in e.fields) if e.fields
                                    else "") + "}\n"


def _field_text(f: Field) -> str:
    out = (f.label + " " if f.label else "") + f"{f.type} {f.name} = {f.number}"
    options = list(f.options)
    if f.default is not None:  # unquoted but a string's, as Confluent writes it; a bytes default that would not
        kind = f.type.rsplit(".", 1)[-1]  # read back as one word is quoted, so that the stored text parses again
        quoted = kind == "string" or (kind == "bytes" and not re.fullmatch(r"[A-Za-z0-9_.+-]+", f.default))
        options.append(Option("default", f.default if quoted else Raw(f.default)))
    if f.json_name is not None:
        options.append(Option("json_name", f.json_name))
    if options:
        out += " " + _options_list(options)
    return out + ";\n"


def _enum_text(e: Enum) -> str:
    out = f"enum {e.name} {{"
    if e.reserved:
        out += "\n" + _ranges("reserved", e.reserved)
    elif e.options or e.constants:
        out += "\n"
    out += "".join(_indent(_option_statement(o)) for o in e.options)
    for c in e.constants:
        out += _indent(f"{c.name} = {c.number}" + (" " + _options_list(c.options) if c.options else "") + ";\n")
    return out + "}\n"


def _types_text(types: list[Message | Enum]) -> str:
    """Messages first, then enums, each in its order (the order of messages is the client's message indexes)."""
    return "".join(_message_text(t) for t in types if isinstance(t, Message)) + \
        "".join(_enum_text(t) for t in types if isinstance(t, Enum))


def _message_text(m: Message) -> str:
    out = f"message {m.name} {{"
    if m.reserved:
        out += "\n" + _ranges("reserved", m.reserved)
    if m.options:
        out += "\n" + "".join(_indent(_option_statement(o)) for o in m.options)
    if m.fields:
        out += "\n" + "".join(_indent(_field_text(f)) for f in m.fields)
    if m.oneofs:
        out += "\n"
        for o in m.oneofs:
            body = f"oneof {o.name} {{"
            if o.options:
                body += "\n" + "".join(_indent(_option_statement(x)) for x in o.options)
            if o.fields:
                body += "\n" + "".join(_indent(_field_text(f)) for f in o.fields)
            out += _indent(body + "}\n")
    if m.extensions:
        out += "\n" + _ranges("extensions", m.extensions)
    if m.extends:
        out += "\n" + "".join(_indent(_extend_text(e)) for e in m.extends)
    if m.nested:
        out += "\n" + _indent(_types_text(m.nested))
    return out + "}\n"


def _rpc_text(r: Rpc) -> str:
    out = f"rpc {r.name} ({'stream ' if r.request_stream else ''}{r.request}) returns " \
          f"({'stream ' if r.response_stream else ''}{r.response})"
    if r.options:
        out += " {\n" + "".join(_indent(_option_statement(o)) for o in r.options) + "}"
    return out + ";\n"


def canonical_text(proto: ProtoFile) -> str:
    """Confluent's canonical text of a file (ProtobufSchemaUtils.toString, not normalized): what the registry
    stores and answers."""
    out = f'syntax = "{proto.syntax}";\n' if proto.syntax else ""
    if proto.package:
        out += f"package {proto.package};\n"
    # weak imports too, as Wire writes them: Confluent's drops them, and its stored text would not parse again
    if proto.imports or proto.public_imports or proto.weak_imports:
        out += "\n" + "".join(f'import "{i}";\n' for i in proto.imports) + \
            "".join(f'import public "{i}";\n' for i in proto.public_imports) + \
            "".join(f'import weak "{i}";\n' for i in proto.weak_imports)
    if proto.options:
        out += "\n" + "".join(_option_statement(o) for o in proto.options)
    if proto.types:
        out += "\n" + _types_text(proto.types)
    if proto.extends:
        out += "\n" + "".join(_extend_text(e) for e in proto.extends)
    if proto.services:
        out += "\n"
        for s in proto.services:
            body = f"service {s.name} {{"
            if s.options:
                body += "\n" + "".join(_indent(_option_statement(o)) for o in s.options)
            if s.rpcs:
                body += "\n" + "".join(_indent(_rpc_text(r)) for r in s.rpcs)
            out += body + "}\n"
    return out


# -- names: every type a file and its dependencies declare, and a field type's full name ----------------
@dataclass
class TypeInfo:
    full_name: str  # without the leading dot
    element: Message | Enum
    package: str
    file: str | None  # where it is declared: "" the schema itself (compat: a reference, None well-known)

    @property
    def is_map_entry(self) -> bool:
        return isinstance(self.element, Message) and any(
            o.name == "map_entry" and str(o.value) == "true" for o in self.element.options)


def declared_types(proto: ProtoFile, file: str = "") -> dict[str, TypeInfo]:
    """Full name (no leading dot) -> TypeInfo of every message and enum the file declares."""
    out: dict[str, TypeInfo] = {}
    package = proto.package or ""

    def walk(types: list[Message | Enum], prefix: str) -> None:
        for t in types:
            full = prefix + t.name
            out[full] = TypeInfo(full, t, package, file)
            if isinstance(t, Message):
                walk(t.nested, full + ".")
    walk(proto.types, package + "." if package else "")
    return out


def scopes_of(types: dict[str, TypeInfo]) -> set[str]:
    """Every name a declared type's full name starts with (its packages' and enclosing messages' names)."""
    out = set()
    for full in types:
        parts = full.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return out


def resolve_name(name: str, scope: str, types: dict[str, TypeInfo], scopes: set[str]) -> str | None:
    """The full name (no leading dot) `name` means inside `scope` (a full name), as protoc looks it up: its
    first part from the innermost scope outward, then the rest inside what that found (`scopes`:
    scopes_of(types))."""
    if name.startswith("."):
        return name[1:] if name[1:] in types else None
    first, _, rest = name.partition(".")
    parts = scope.split(".") if scope else []
    while True:
        prefix = ".".join(parts)
        candidate = (prefix + "." if prefix else "") + first
        if candidate in types or candidate in scopes:
            full = candidate + ("." + rest if rest else "")
            if full in types:
                return full
            if candidate in types:  # protoc stops at the first scope that declares the first part
                return None
        if not parts:
            return None
        parts.pop()


# -- the descriptor ----------------------------------------------------------------------------------------
def _descriptor_pb2() -> Any:
    try:
        from google.protobuf import descriptor_pb2
    except ImportError:  # the connect extra brings protobuf
        raise ProtoError("Protobuf schemas need the protobuf package (pip install 'klog[connect]')") from None
    return descriptor_pb2


_TYPE_NUMBERS = {name: i for i, name in enumerate(
    ("double", "float", "int64", "uint64", "int32", "fixed64", "fixed32", "bool", "string", "group", "message",
     "bytes", "uint32", "enum", "sfixed32", "sfixed64", "sint32", "sint64"), start=1)}
_TYPE_NAMES = {number: name for name, number in _TYPE_NUMBERS.items()}
_LABELS = {"optional": 1, "required": 2, "repeated": 3}


def _camel(name: str) -> str:
    """A map field's entry message name, as protoc makes it: foo_bar -> FooBarEntry."""
    out, upper = [], True
    for c in name:
        if c == "_":
            upper = True
        else:
            out.append(c.upper() if upper else c)
            upper = False
    return "".join(out) + "Entry"


def _repeated(spec: Any) -> bool:
    """protobuf 7 has FieldDescriptor.is_repeated and no label; older ones the label."""
    flag = getattr(spec, "is_repeated", None)
    return bool(flag) if flag is not None else spec.label == spec.LABEL_REPEATED


def _set_options(target: Any, options: list[Option], where: str) -> None:
    """Plain options set on a descriptor's options message; custom (parenthesized) ones are skipped."""
    for option in options:
        if option.name.startswith("("):
            continue
        spec = target.DESCRIPTOR.fields_by_name.get(option.name)
        if spec is None or isinstance(option.value, dict | list):
            raise ProtoError(f"option {option.name} of {where} is not a known option")
        value = option.value
        try:
            if spec.type == spec.TYPE_BOOL:
                if value not in ("true", "false"):
                    raise ValueError
                value = value == "true"
            elif spec.type == spec.TYPE_ENUM:
                value = spec.enum_type.values_by_name[str(value)].number
            elif spec.type in (spec.TYPE_STRING, spec.TYPE_BYTES):
                if isinstance(value, Raw):
                    raise ValueError
                value = value if spec.type == spec.TYPE_STRING else value.encode("latin-1")
            elif spec.type in (spec.TYPE_FLOAT, spec.TYPE_DOUBLE):
                value = float(value)
            else:
                value = int(value, 0)
            if _repeated(spec):
                getattr(target, option.name).append(value)
            else:
                setattr(target, option.name, value)
        except (ValueError, KeyError, TypeError, UnicodeError):
            raise ProtoError(f"option {option.name} of {where}: {_value(option.value)} is no valid value") from None


class _Builder:
    """A parsed file made a FileDescriptorProto: each field's type resolved to its full name (ProtoError
    naming a type that resolves to nothing), maps as their entry messages, proto3 optional as protoc
    writes it."""

    def __init__(self, proto: ProtoFile, types: dict[str, TypeInfo]) -> None:
        self.proto = proto
        self.types = types
        self.scopes = scopes_of(types)
        self.pb2 = _descriptor_pb2()

    def file(self, name: str) -> Any:
        out = self.pb2.FileDescriptorProto(name=name)
        if self.proto.package:
            out.package = self.proto.package
        if self.proto.syntax:
            out.syntax = self.proto.syntax
        for i, dep in enumerate(self.proto.dependencies()):
            out.dependency.append(dep)
            if dep in self.proto.public_imports and i >= len(self.proto.imports):
                out.public_dependency.append(i)
            if dep in self.proto.weak_imports and i >= len(self.proto.imports) + len(self.proto.public_imports):
                out.weak_dependency.append(i)
        _set_options(out.options, self.proto.options, "the file")
        prefix = self.proto.package or ""
        for t in self.proto.types:
            if isinstance(t, Message):
                out.message_type.append(self.message(t, prefix))
            else:
                out.enum_type.append(self.enum(t))
        out.extension.extend(self.extends(self.proto.extends, prefix))
        for s in self.proto.services:
            out.service.append(self.service(s, prefix))
        if not out.options.ListFields():
            out.ClearField("options")
        return out

    def extends(self, extends: list[Extend], scope: str) -> list[Any]:
        """An `extend` block's fields, each an extension field naming its extended message (extendee)."""
        out = []
        for e in extends:
            extendee = resolve_name(e.name, scope, self.types, self.scopes)
            if extendee is None:
                raise ProtoError(f"extend {e.name} (in {scope or 'the file'}): the message is not defined")
            for f in e.fields:
                if f.type.startswith("map<"):
                    raise ProtoError(f"extension {f.name} of {e.name} cannot be a map")
                extension = self.field(f, scope, None)
                extension.extendee = "." + extendee
                out.append(extension)
        return out

    def message(self, m: Message, scope: str) -> Any:
        full = (scope + "." if scope else "") + m.name
        out = self.pb2.DescriptorProto(name=m.name)
        _set_options(out.options, m.options, f"message {full}")
        for t in m.nested:  # nested types first, then fields (map entries after the nested types), as
            if isinstance(t, Message):  # Confluent's ProtobufSchema.toDynamicMessage orders them
                out.nested_type.append(self.message(t, full))
            else:
                out.enum_type.append(self.enum(t))
        for index, o in enumerate(m.oneofs):
            decl = out.oneof_decl.add(name=o.name)
            _set_options(decl.options, o.options, f"oneof {full}.{o.name}")
            if not decl.options.ListFields():
                decl.ClearField("options")
            for f in o.fields:
                out.field.append(self.field(f, full, out))
                out.field[-1].oneof_index = index
        for f in m.fields:
            out.field.append(self.field(f, full, out))
            if f.label == "optional" and self.proto.proto3:  # a synthetic oneof each, after the real ones
                out.field[-1].proto3_optional = True
                out.field[-1].oneof_index = len(out.oneof_decl)
                out.oneof_decl.add(name="_" + f.name)
        for r in (r for statement in m.reserved for r in statement):
            if isinstance(r, str):
                out.reserved_name.append(r)
            else:
                start, end = r if isinstance(r, tuple) else (r, r)
                out.reserved_range.add(start=start, end=end + 1)
        for r in (r for statement in m.extensions for r in statement):
            start, end = r if isinstance(r, tuple) else (r, r)
            out.extension_range.add(start=start, end=end + 1)
        out.extension.extend(self.extends(m.extends, full))
        if not out.options.ListFields():
            out.ClearField("options")
        return out

    def field(self, f: Field, scope: str, message: Any) -> Any:
        out = self.pb2.FieldDescriptorProto(name=f.name, number=f.number)
        kind = f.type
        if kind.startswith("map<"):
            key, value = kind[4:-1].split(", ")
            entry = self.pb2.DescriptorProto(name=_camel(f.name))
            entry.options.map_entry = True
            entry.field.append(self._typed(self.pb2.FieldDescriptorProto(name="key", number=1, label=1), key, scope))
            entry.field.append(self._typed(self.pb2.FieldDescriptorProto(name="value", number=2, label=1), value,
                                           scope))
            message.nested_type.append(entry)
            out.label = 3
            out.type = _TYPE_NUMBERS["message"]
            out.type_name = "." + scope + "." + entry.name
        else:
            out.label = _LABELS[f.label] if f.label else 1
            self._typed(out, kind, scope)
        if f.default is not None:
            out.default_value = f.default
        if f.json_name is not None:
            out.json_name = f.json_name
        _set_options(out.options, f.options, f"field {scope}.{f.name}")
        if not out.options.ListFields():
            out.ClearField("options")
        return out

    def _typed(self, out: Any, kind: str, scope: str) -> Any:
        if kind in SCALARS:
            out.type = _TYPE_NUMBERS[kind]
            return out
        full = resolve_name(kind, scope, self.types, self.scopes)
        if full is None:
            raise ProtoError(f"type {kind} (in {scope}) is not defined (a missing import or reference?)")
        info = self.types[full]
        out.type = _TYPE_NUMBERS["enum" if isinstance(info.element, Enum) else "message"]
        out.type_name = "." + full
        return out

    def enum(self, e: Enum) -> Any:
        out = self.pb2.EnumDescriptorProto(name=e.name)
        _set_options(out.options, e.options, f"enum {e.name}")
        for c in e.constants:
            value = out.value.add(name=c.name, number=c.number)
            _set_options(value.options, c.options, f"enum constant {c.name}")
            if not value.options.ListFields():
                value.ClearField("options")
        for r in (r for statement in e.reserved for r in statement):
            if isinstance(r, str):
                out.reserved_name.append(r)
            else:
                start, end = r if isinstance(r, tuple) else (r, r)
                out.reserved_range.add(start=start, end=end)  # an enum's range is inclusive
        if not out.options.ListFields():
            out.ClearField("options")
        return out

    def service(self, s: Service, scope: str) -> Any:
        out = self.pb2.ServiceDescriptorProto(name=s.name)
        _set_options(out.options, s.options, f"service {s.name}")
        for r in s.rpcs:
            method = out.method.add(name=r.name)
            for attr, kind in (("input_type", r.request), ("output_type", r.response)):
                full = resolve_name(kind, scope, self.types, self.scopes)
                if full is None:
                    raise ProtoError(f"type {kind} of rpc {s.name}.{r.name} is not defined")
                setattr(method, attr, "." + full)
            if r.request_stream:
                method.client_streaming = True
            if r.response_stream:
                method.server_streaming = True
            _set_options(method.options, r.options, f"rpc {r.name}")
            if not method.options.ListFields():
                method.ClearField("options")
        if not out.options.ListFields():
            out.ClearField("options")
        return out


def to_descriptor(proto: ProtoFile, dependencies: dict[str, ProtoFile], name: str = "default",
                  strict: bool = True) -> Any:
    """The FileDescriptorProto of a parsed file, its type names resolved against itself and `dependencies`
    (import name -> parsed file; ProtoError naming an import not among them or a type defined nowhere), checked
    (`strict`) as protoc and a client's descriptor pool check it (check_in_pool)."""
    out = _build(proto, dependencies, name)
    if strict:
        check_in_pool(out, dependencies)
    return out


def _build(proto: ProtoFile, dependencies: dict[str, ProtoFile], name: str) -> Any:
    types: dict[str, TypeInfo] = {}
    for dep in proto.dependencies():
        if dep not in dependencies:
            raise ProtoError(f"import {dep!r} is neither a well-known file nor one of the schema's references")
    for dep_name in _visible(proto, dependencies):  # as protoc: the imported files and their public imports
        types.update(declared_types(dependencies[dep_name], dep_name))
    types.update(declared_types(proto))
    return _Builder(proto, types).file(name)


def check_in_pool(descriptor: Any, dependencies: dict[str, ProtoFile]) -> None:
    """ProtoError when protobuf's descriptor pool (the one confluent-kafka's deserializer loads a schema into)
    refuses the file: what protoc refuses past the grammar, as symbols declared twice (enum values are
    siblings of their enum), an empty oneof, a proto3 default or first enum value other than 0, two fields
    of one JSON name, a default of the wrong type. Its imports are loaded first (each reference built
    again, each well-known file as protobuf ships it)."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    loaded: set[str] = set()

    def load(file: Any, what: str, loading: frozenset[str]) -> None:
        for dep in file.dependency:
            if dep not in loaded and dep not in loading and dep in dependencies:
                load(_dependency_descriptor(dep, dependencies), f"its import {dep!r}", loading | {dep})
        try:
            pool.Add(file)
            pool.FindFileByName(file.name)
        except Exception as e:  # noqa: BLE001 - protobuf's refusal is a TypeError (upb) or a descriptor error
            reason = str(e).removeprefix("Couldn't build proto file into descriptor pool: ")
            raise ProtoError(f"protobuf's descriptor pool refuses {what}: {reason}") from None
        loaded.add(file.name)

    load(descriptor, "it", frozenset())


_WELL_KNOWN_DESCRIPTORS: dict[str, Any] = {}


def _dependency_descriptor(name: str, dependencies: dict[str, ProtoFile]) -> Any:
    """An import's FileDescriptorProto: a well-known file's as protobuf ships it, a reference's built."""
    if dependencies[name] is well_known().get(name):
        return _WELL_KNOWN_DESCRIPTORS[name]
    return _build(dependencies[name], dependencies, name)


def _visible(proto: ProtoFile, dependencies: dict[str, ProtoFile]) -> list[str]:
    out: list[str] = []
    todo = list(proto.dependencies())
    while todo:
        name = todo.pop()
        if name not in out and name in dependencies:
            out.append(name)
            todo += dependencies[name].public_imports
    return out


# the order Confluent's ProtobufSchema.toProtoFile writes a descriptor's file and field options in; other
# options (and any not named here, after these) by field number, as it writes them
_CONFLUENT_ORDER = {
    "FileOptions": ("java_package", "java_outer_classname", "java_multiple_files", "java_generate_equals_and_hash",
                    "java_string_check_utf8", "optimize_for", "go_package", "cc_generic_services",
                    "java_generic_services", "py_generic_services", "deprecated", "cc_enable_arenas",
                    "objc_class_prefix", "csharp_namespace", "swift_prefix", "php_class_prefix", "php_namespace",
                    "php_metadata_namespace", "ruby_package"),
    "FieldOptions": ("ctype", "packed", "jstype", "deprecated", "debug_redact", "retention", "targets"),
}


def _options_of(message: Any) -> list[Option]:
    """A descriptor's options message as Options (each set field, in Confluent's order)."""
    out: list[Option] = []
    if message is None:
        return out
    order = _CONFLUENT_ORDER.get(message.DESCRIPTOR.name, ())
    for spec, value in sorted(message.ListFields(), key=lambda item: (
            order.index(item[0].name) if item[0].name in order else len(order), item[0].number)):
        if spec.name in ("uninterpreted_option", "features") or spec.message_type is not None:
            continue
        for v in value if _repeated(spec) else [value]:
            if spec.type == spec.TYPE_BOOL:
                out.append(Option(spec.name, Raw("true" if v else "false")))
            elif spec.type == spec.TYPE_ENUM:
                out.append(Option(spec.name, Raw(spec.enum_type.values_by_number[v].name)))
            elif spec.type in (spec.TYPE_STRING, spec.TYPE_BYTES):
                out.append(Option(spec.name, v if isinstance(v, str) else v.decode("latin-1")))
            else:
                out.append(Option(spec.name, Raw(repr(v) if isinstance(v, float) else str(v))))
    return out


def _field_of(f: Any, proto3: bool, in_oneof: bool) -> Field:
    kind = f.type_name if f.type_name else _TYPE_NAMES.get(f.type, "")
    if not kind or kind == "group":
        raise ProtoError(f"field {f.name}: groups and unknown types are not supported")
    label: str | None
    if in_oneof:
        label = None
    elif f.proto3_optional:
        label = "optional"
    elif f.label == 3:
        label = "repeated"
    elif proto3:
        label = None
    else:
        label = "required" if f.label == 2 else "optional"
    return Field(f.name, f.number, kind, label, _options_of(f.options if f.HasField("options") else None),
                 f.default_value if f.HasField("default_value") and not proto3 else None,
                 f.json_name if f.HasField("json_name") else None)


def _ranges_of(ranges: Any, exclusive: bool) -> list[Any]:
    out: list[Any] = []
    for r in ranges:
        end = r.end - 1 if exclusive else r.end
        out.append(r.start if end == r.start else (r.start, end))
    return out


def _message_of(d: Any, proto3: bool, depth: int = 0) -> Message:
    if depth > MAX_DEPTH:
        raise ProtoError(f"messages nested deeper than {MAX_DEPTH} levels")
    out = Message(d.name, options=_options_of(d.options if d.HasField("options") else None))
    oneofs = [OneOf(o.name, options=_options_of(o.options if o.HasField("options") else None))
              for o in d.oneof_decl]
    for f in d.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            if f.oneof_index >= len(oneofs):
                raise ProtoError(f"field {f.name} of {d.name} names oneof {f.oneof_index}, which is not declared")
            oneofs[f.oneof_index].fields.append(_field_of(f, proto3, in_oneof=True))
        else:
            out.fields.append(_field_of(f, proto3, in_oneof=False))
    synthetic = {f.oneof_index for f in d.field if f.proto3_optional and f.HasField("oneof_index")}
    out.oneofs = [o for i, o in enumerate(oneofs) if i not in synthetic]
    out.nested = [_message_of(n, proto3, depth + 1) for n in d.nested_type] + [_enum_of(e) for e in d.enum_type]
    out.reserved = [[r] for r in _ranges_of(d.reserved_range, exclusive=True) + list(d.reserved_name)]
    out.extensions = [[r] for r in _ranges_of(d.extension_range, exclusive=True)]
    out.extends = _extends_of(d.extension, proto3)
    return out


def _extends_of(fields: Any, proto3: bool) -> list[Extend]:
    """Extension fields grouped by the message they extend, in their order."""
    out: dict[str, Extend] = {}
    for f in fields:
        out.setdefault(f.extendee, Extend(f.extendee)).fields.append(_field_of(f, proto3, in_oneof=False))
    return list(out.values())


def _elements(messages: Any, enums: Any, depth: int = 0) -> int:
    """How many messages, fields, enums and enum values a descriptor's messages declare (MAX_DEPTH deep)."""
    if depth > MAX_DEPTH:
        raise ProtoError(f"messages nested deeper than {MAX_DEPTH} levels")
    count = len(messages) + sum(1 + len(e.value) for e in enums)
    for m in messages:
        count += len(m.field) + len(m.extension) + _elements(m.nested_type, m.enum_type, depth + 1)
        if count > MAX_ELEMENTS:
            break
    return count


def _enum_of(d: Any) -> Enum:
    return Enum(d.name, [EnumConstant(v.name, v.number, _options_of(v.options if v.HasField("options") else None))
                         for v in d.value],
                _options_of(d.options if d.HasField("options") else None),
                [[r] for r in _ranges_of(d.reserved_range, exclusive=False) + list(d.reserved_name)])


def from_descriptor(fd: Any) -> ProtoFile:
    """A FileDescriptorProto as the model Confluent's ProtobufSchema makes of it (toProtoFile): full type names
    with their leading dot, a map field its entry message (option map_entry), proto3 optional as `optional`."""
    proto3 = fd.syntax == "proto3"
    if fd.syntax not in ("", "proto2", "proto3"):
        raise ProtoError(f"syntax {fd.syntax!r} is not supported")
    if _elements(fd.message_type, fd.enum_type) + len(fd.extension) > MAX_ELEMENTS:
        raise ProtoError(f"the descriptor declares more than {MAX_ELEMENTS} messages, fields and enum values")
    public = set(fd.public_dependency)
    weak = set(fd.weak_dependency)
    deps = list(fd.dependency)
    out = ProtoFile(fd.syntax or None, fd.package or None,
                    [d for i, d in enumerate(deps) if i not in public and i not in weak],
                    [d for i, d in enumerate(deps) if i in public],
                    [d for i, d in enumerate(deps) if i in weak],
                    _options_of(fd.options if fd.HasField("options") else None))
    out.types = [_message_of(m, proto3) for m in fd.message_type] + [_enum_of(e) for e in fd.enum_type]
    out.extends = _extends_of(fd.extension, proto3)
    for s in fd.service:
        out.services.append(Service(s.name, [Rpc(m.name, m.input_type, m.output_type, m.client_streaming,
                                                 m.server_streaming,
                                                 _options_of(m.options if m.HasField("options") else None))
                                             for m in s.method],
                                    _options_of(s.options if s.HasField("options") else None)))
    return out


def decode_serialized(text: str) -> Any:
    """A FileDescriptorProto from its base64 (ProtoError when it is neither)."""
    pb2 = _descriptor_pb2()
    try:
        data = base64.b64decode(text.strip(), validate=True)
        out = pb2.FileDescriptorProto()
        out.ParseFromString(data)
    except (binascii.Error, ValueError, Exception) as e:  # noqa: BLE001 - protobuf's DecodeError and others
        raise ProtoError(f"not a .proto text nor a base64 FileDescriptorProto ({type(e).__name__})") from None
    out.ClearField("source_code_info")  # comments and spans: not kept
    _check_utf8(out)
    return out


def _check_utf8(message: Any) -> None:
    """ProtoError when a string of a decoded descriptor is not UTF-8 (protobuf gives such a proto2 string as
    bytes, which no name or text may be)."""
    for spec, value in message.ListFields():
        values = value if _repeated(spec) else [value]
        if spec.type == spec.TYPE_STRING and any(isinstance(v, bytes) for v in values):
            raise ProtoError(f"the descriptor's {spec.name} is not UTF-8 text")
        if spec.message_type is not None:
            for v in values:
                _check_utf8(v)


def looks_serialized(text: str) -> bool:
    """Base64 (a serialized FileDescriptorProto) rather than .proto text: no spaces, braces or semicolons."""
    stripped = text.strip()
    return bool(stripped) and re.fullmatch(r"[A-Za-z0-9+/=\s]+", stripped) is not None and "{" not in stripped \
        and not re.search(r"\s", stripped)


def serialized(descriptor: Any) -> str:
    """The base64 of a FileDescriptorProto (what `?format=serialized` answers)."""
    return base64.b64encode(descriptor.SerializeToString(deterministic=True)).decode("ascii")


# -- the files every schema may import without a reference (Confluent's KNOWN_DEPENDENCIES) ---------------
_GOOGLE_PROTOBUF = ("any", "api", "descriptor", "duration", "empty", "field_mask", "source_context", "struct",
                    "timestamp", "type", "wrappers")
# google/type's files, from googleapis-common-protos when it is installed (confluent-kafka's protobuf serde
# needs it); five of them are declared below for when it is not
_GOOGLE_TYPE = ("calendar_period", "color", "date", "datetime", "dayofweek", "decimal", "expr", "fraction",
                "interval", "latlng", "money", "month", "phone_number", "postal_address", "quaternion", "timeofday")
# Confluent's own and google/type's files, declared here (their messages and enums: what a field may name)
_DECLARED = {
    "confluent/meta.proto": 'syntax = "proto3"; package confluent; message Meta { string doc = 1; '
                            "map<string, string> params = 2; repeated string tags = 3; }",
    "confluent/type/decimal.proto": 'syntax = "proto3"; package confluent.type; '
                                    "message Decimal { bytes value = 1; uint32 precision = 2; int32 scale = 3; }",
    "google/type/date.proto": 'syntax = "proto3"; package google.type; '
                              "message Date { int32 year = 1; int32 month = 2; int32 day = 3; }",
    "google/type/timeofday.proto": 'syntax = "proto3"; package google.type; message TimeOfDay { int32 hours = 1; '
                                   "int32 minutes = 2; int32 seconds = 3; int32 nanos = 4; }",
    "google/type/money.proto": 'syntax = "proto3"; package google.type; '
                               "message Money { string currency_code = 1; int64 units = 2; int32 nanos = 3; }",
    "google/type/latlng.proto": 'syntax = "proto3"; package google.type; '
                                "message LatLng { double latitude = 1; double longitude = 2; }",
    "google/type/decimal.proto": 'syntax = "proto3"; package google.type; message Decimal { string value = 1; }',
}
_WELL_KNOWN: dict[str, ProtoFile] = {}
_WELL_KNOWN_LOCK = threading.Lock()


def well_known() -> dict[str, ProtoFile]:
    """Import name -> parsed file of each file a schema imports without a reference: google/protobuf/*.proto
    (from the protobuf package's own descriptors), confluent/meta.proto, confluent/type/decimal.proto and
    google/type/*.proto (from googleapis-common-protos; without it, five of them). Read once, under a lock:
    two first requests at once each read them, and the second's replaced the objects the first's parse held
    (check_in_pool then took them for references)."""
    if _WELL_KNOWN:
        return _WELL_KNOWN
    with _WELL_KNOWN_LOCK:
        if not _WELL_KNOWN:
            _read_well_known()
    return _WELL_KNOWN


def _read_well_known() -> None:
    import importlib

    pb2 = _descriptor_pb2()
    found = {name: parse_text(text) for name, text in _DECLARED.items()}
    descriptors = {name: _build(file, {}, name) for name, file in found.items()}
    modules = [f"google.protobuf.{name}_pb2" for name in _GOOGLE_PROTOBUF] + \
        [f"google.type.{name}_pb2" for name in _GOOGLE_TYPE]
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:  # google.type without googleapis-common-protos
            continue
        descriptor = pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        found[descriptor.name], descriptors[descriptor.name] = from_descriptor(descriptor), descriptor
    _WELL_KNOWN_DESCRIPTORS.update(descriptors)
    _WELL_KNOWN.update(found)


def identity(descriptor: Any, proto: ProtoFile) -> bytes:
    """What makes two registrations the same Protobuf schema, .proto text or serialized alike: the resolved
    descriptor, its fields by number, nested enums by name, nested messages in their order (a message's place
    among its siblings is its message index, nested or not) with the map entries protoc puts among them
    last, by name (a text's are not declared), and the custom options (not in the descriptor)."""
    copy = type(descriptor)()
    copy.CopyFrom(descriptor)
    copy.name = ""

    def order(message: Any) -> None:
        for f in message.field:
            if f.json_name == _json_name(f.name):  # protoc writes the default one; a .proto text does not
                f.ClearField("json_name")
        fields = sorted(message.field, key=lambda f: f.number)
        del message.field[:]
        message.field.extend(fields)
        for kind, place in (("nested_type", _nested_place), ("enum_type", lambda t: t.name)):
            items = sorted(getattr(message, kind), key=place)
            del getattr(message, kind)[:]
            getattr(message, kind).extend(items)
        for nested in message.nested_type:
            order(nested)
    for message in copy.message_type:
        order(message)
    custom = [_option(o) for o in _all_options(proto) if o.name.startswith("(")]
    return copy.SerializeToString(deterministic=True) + "\n".join(custom).encode()


def _nested_place(nested: Any) -> tuple[bool, str]:
    """A nested message's sort key (a stable sort): declared ones keep their order, map entries go last."""
    return (True, nested.name) if nested.options.map_entry else (False, "")


def _json_name(name: str) -> str:
    """protoc's default json_name: foo_bar -> fooBar."""
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _all_options(proto: ProtoFile) -> list[Option]:
    out = list(proto.options)

    def walk(types: list[Message | Enum]) -> None:
        for t in types:
            out.extend(t.options)
            if isinstance(t, Message):
                for f in t.all_fields():
                    out.extend(f.options)
                for o in t.oneofs:
                    out.extend(o.options)
                walk(t.nested)
            else:
                for c in t.constants:
                    out.extend(c.options)
    walk(proto.types)
    for s in proto.services:
        out.extend(s.options)
        for r in s.rpcs:
            out.extend(r.options)
    return out
