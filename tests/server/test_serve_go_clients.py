"""Debian's Go Kafka clients against klog serve: sarama 1.22 (default settings: Produce v0 with
magic 0 message sets in every codec, a partition consumer, a consumer group committing through
OffsetCommit v1, admin ListTopics / DescribeConfig / ListAcls on their v0 requests) and kafka-go
0.2.1 (Produce v2 / Fetch v2, magic 1). Built offline in GOPATH mode over /usr/share/gocode with
Debian's Go toolchain (tests/run.sh installs the packages as root); skipped where they are not."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

GO = shutil.which("go")
GOCODE = "/usr/share/gocode/src/github.com"
HERE = os.path.join(os.path.dirname(__file__), "go")
NEEDS = {"sarama_check": "Shopify/sarama", "kafkago_check": "segmentio/kafka-go"}


def _binary(name: str, tmp_path_factory) -> str:  # noqa: ANN001
    if GO is None:
        pytest.skip("Debian's Go toolchain is not installed (apt-get install golang-go)")
    if not os.path.isdir(os.path.join(GOCODE, NEEDS[name])):
        pytest.skip(f"Debian's {NEEDS[name]} is not installed under /usr/share/gocode")
    out = str(tmp_path_factory.getbasetemp() / name)
    if not os.path.exists(out):
        env = dict(os.environ, GOPATH="/usr/share/gocode", GO111MODULE="off",
                   GOCACHE=os.environ.get("GOCACHE", os.path.expanduser("~/.cache/go-build")), GOFLAGS="")
        r = subprocess.run([GO, "build", "-o", out, "."], cwd=os.path.join(HERE, name), env=env,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.skip(f"{name} does not build offline: {r.stderr.strip()[-300:]}")
    return out


@pytest.mark.slow
def test_sarama_with_default_settings(kafka_server, store, tmp_path_factory):
    binary = _binary("sarama_check", tmp_path_factory)
    store.create_topic("sarama", partitions=1)
    r = subprocess.run([binary, kafka_server.bootstrap, "sarama"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [line for line in r.stdout.splitlines() if line.startswith("ok")] == [
        "ok produce none", "ok produce gzip", "ok produce snappy", "ok produce lz4", "ok produce async",
        "ok consume 21", "ok group 21", "ok list topics", "ok describe config", "ok list acls"]


@pytest.mark.slow
def test_kafka_go_produces_and_consumes(kafka_server, store, tmp_path_factory):
    binary = _binary("kafkago_check", tmp_path_factory)
    store.create_topic("kgo", partitions=1)
    r = subprocess.run([binary, kafka_server.bootstrap, "kgo", "10"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    reads = [line.split() for line in r.stdout.splitlines() if line.startswith("read")]
    assert [(int(o), k, v) for _, o, k, v, _ in reads] == [(i, f"k{i}", f"v{i}") for i in range(10)]
    assert all(int(ts) > 0 for *_, ts in reads)  # magic 1 timestamps kept
