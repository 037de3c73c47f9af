"""The schema walk (klog/protocol/walk.py) the cluster client runs over every answer before kio reads
it follows each response the client reads, header included (v0, or v1 with tagged fields), to the
byte where kio's reader ends, counting its arrays; and refuses an array claiming more entries than
the answer has bytes left."""

from __future__ import annotations

import importlib
import io

import pytest

from klog.protocol.walk import ArrayPastFrame, _Walker, check_arrays
from tests.serve_helpers import sample_entity

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402

# (module under kio.schema, response class) of every answer klog.client.remote reads with kio
CLIENT_RESPONSES = [("api_versions.v2", "ApiVersionsResponse"),
                    *((f"fetch.v{v}", "FetchResponse") for v in range(4, 12)),
                    ("find_coordinator.v1", "FindCoordinatorResponse"), ("offset_delete.v0", "OffsetDeleteResponse"),
                    ("describe_log_dirs.v1", "DescribeLogDirsResponse"), ("sasl_handshake.v1", "SaslHandshakeResponse"),
                    ("sasl_authenticate.v1", "SaslAuthenticateResponse"),
                    ("list_transactions.v0", "ListTransactionsResponse"),
                    ("describe_producers.v0", "DescribeProducersResponse"),
                    ("write_txn_markers.v1", "WriteTxnMarkersResponse")]
NO_ARRAYS = {"FindCoordinatorResponse", "SaslAuthenticateResponse"}


def _responses() -> list[type]:
    from klog.client.remote.txn_admin import _describe_response

    classes = [getattr(importlib.import_module(f"kio.schema.{mod}.response"), name) for mod, name in CLIENT_RESPONSES]
    return [*classes, _describe_response()]  # DescribeTransactions, its start time read as int64


def _answer(cls: type) -> bytes:
    buf = io.BytesIO()
    header = cls.__header_schema__
    entity_writer(header)(buf, header(correlation_id=7))
    entity_writer(cls)(buf, sample_entity(cls, {"string": "x", "records": b"abc", "error_code": ErrorCode.none}))
    return buf.getvalue()


@pytest.mark.parametrize("cls", _responses(), ids=lambda c: f"{c.__name__}v{c.__version__}")
def test_the_walk_ends_where_kio_ends_for_every_answer_the_client_reads(cls):
    frame = _answer(cls)
    _, start = entity_reader(cls.__header_schema__)(frame, 0)
    _, used = entity_reader(cls)(frame, start)  # (the bytes it read)
    end = start + used
    walker = _Walker(frame, len(frame))
    assert walker.entity(cls, walker.entity(cls.__header_schema__, 0)) == end == len(frame)
    assert check_arrays(frame, 0, cls.__header_schema__, cls) == walker.count
    assert walker.count > 0 or cls.__name__ in NO_ARRAYS  # the samples' arrays hold an entry each


def test_an_array_claiming_more_entries_than_bytes_left_is_refused():
    from kio.schema.list_transactions.v0.response import ListTransactionsResponse

    frame = _answer(ListTransactionsResponse)
    # header v1: correlation id, no tags; then throttle, error code, unknown_state_filters: 2**32 - 2
    hostile = frame[:11] + b"\xff\xff\xff\xff\x0f" + frame[12:]
    with pytest.raises(ArrayPastFrame, match="4294967294 entries"):
        check_arrays(hostile, 0, ListTransactionsResponse.__header_schema__, ListTransactionsResponse)
