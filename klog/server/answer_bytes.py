"""Kafka's wire primitives for the answers klog lays out by hand (produce_response, metadata_response):
strings and array counts in the classic encoding (int16 / int32 lengths) or the flexible one (uvarints)."""

from __future__ import annotations

import struct

from klog.store.codec import encode_uvarint

I32 = struct.Struct(">i")
I16 = struct.Struct(">h")


def string_bytes(text: str | None, flexible: bool) -> bytes:
    """A nullable string: a compact string (flexible) or an int16-length one."""
    if text is None:
        return b"\0" if flexible else b"\xff\xff"
    data = text.encode()
    return (encode_uvarint(len(data) + 1) if flexible else I16.pack(len(data))) + data


def count_bytes(n: int, flexible: bool) -> bytes:
    """An array's count: a compact count (flexible) or an int32."""
    return encode_uvarint(n + 1) if flexible else I32.pack(n)
