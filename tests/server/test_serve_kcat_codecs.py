"""Debian's kcat (librdkafka 2.0.2) with -z gzip|snappy|lz4|zstd: librdkafka decides which codecs a
broker takes from the Produce versions it advertises (gzip/snappy/lz4 need Produce v0-v2 in the
range, zstd v7+). Each batch is stored with the codec kcat asked for, as `klog dump` shows, and
reads back."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

KCAT = shutil.which("kcat")
CODECS = ["gzip", "snappy", "lz4", "zstd"]


@pytest.mark.slow  # kcat takes a few seconds per run
@pytest.mark.skipif(KCAT is None, reason="kcat not installed (tests/run.sh installs Debian's as root)")
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_compressed_batches_are_stored_compressed(kafka_server, store, cli, codec):
    store.create_topic(codec, partitions=1)
    lines = "".join(f"record {i} {'x' * 50}\n" for i in range(20))
    out = subprocess.run([KCAT, "-b", kafka_server.bootstrap, "-P", "-t", codec, "-p", "0", "-z", codec],
                         input=lines, text=True, capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    r = cli("dump", f"{codec}-0", "--batches", "--json")
    assert r.exit_code == 0, r.stderr
    batches = [d for d in map(json.loads, r.out.splitlines()) if d["type"] == "batch"]
    assert batches and {b["compression"] for b in batches} == {codec}, batches
    out = subprocess.run([KCAT, "-b", kafka_server.bootstrap, "-C", "-t", codec, "-e", "-q"], capture_output=True,
                         text=True, timeout=30)
    assert out.stdout == lines
