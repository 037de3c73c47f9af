"""Burrow, LinkedIn's consumer-lag monitor (Debian's `burrow` 1.2.1), pointed at `klog serve`.

Goal: Burrow lists klog's topics and groups and reports the lag `klog groups describe` shows. Burrow
reads committed offsets from `__consumer_offsets` with its own decoder (Kafka's record format), with
Kafka 0.8's protocol versions by default (Metadata v0, ListOffsets v0, Fetch v0: magic 0 message sets
converted from the stored batches), so this is an independent proof of the topic's format.
Method: a ZooKeeper (Debian's `zookeeper`, Burrow's own state) and Burrow, both on 127.0.0.1 in temp
directories with one-second refresh intervals, started and stopped here; tests/run.sh installs both
where it may (root, apt), and the test is skipped with the reason where they are missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from tests.klog_processes import run_klog
from tests.serve_helpers import kafka_python_commit

BURROW = shutil.which("Burrow") or "/usr/bin/Burrow"
ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
    pytest.mark.skipif(not os.path.exists(BURROW), reason="Debian's burrow is not installed (tests/run.sh "
                       "installs it as root: apt-get install burrow)"),
    pytest.mark.skipif(not os.path.exists(ZOOKEEPER_JAR) or not shutil.which("java"),
                       reason="Debian's zookeeper (and java) is not installed (tests/run.sh installs it as root)"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, log: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited ({proc.returncode}): {open(log, errors='replace').read()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    pytest.fail(f"{what} did not listen on {port} within {timeout} s")


def wait_serving(port: int, proc: subprocess.Popen, log: str, timeout: float = 30) -> None:
    """ZooKeeper listens before it serves sessions (a client then gets EOF): wait until its `srvr`
    says it serves (a Mode line, not "not currently serving requests")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"srvr")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
            if b"Mode:" in answer:
                return
        time.sleep(0.1)
    pytest.fail(f"ZooKeeper never said it serves: {open(log, errors='replace').read()[-2000:]}")


def stop(proc: subprocess.Popen, grace_s: float = 10) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def zookeeper(tmp_path):
    root = tmp_path / "zk"
    (root / "data").mkdir(parents=True)
    port = free_port()
    (root / "zoo.cfg").write_text(f"tickTime=500\ndataDir={root / 'data'}\nclientPort={port}\n"
                                  "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                                  "4lw.commands.whitelist=srvr\n")
    log = str(root / "zk.out")
    with open(log, "wb") as out:
        proc = subprocess.Popen(["java", "-Xmx64m", "-cp", ZOOKEEPER_JAR,
                                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(root / "zoo.cfg")],
                                stdout=out, stderr=subprocess.STDOUT, cwd=root)
    try:
        wait_port(port, proc, "ZooKeeper", log)
        wait_serving(port, proc, log)
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)


def start_burrow(tmp_path, bootstrap: str, zk: str) -> tuple[subprocess.Popen, str, str]:
    root = tmp_path / "burrow"
    root.mkdir()
    port = free_port()
    (root / "burrow.toml").write_text(f"""
[general]
pidfile="{root}/burrow.pid"
[logging]
level="info"
[zookeeper]
servers=["{zk}"]
timeout=6
root-path="/burrow"
[cluster.local]
class-name="kafka"
servers=["{bootstrap}"]
topic-refresh=1
offset-refresh=1
[consumer.local]
class-name="kafka"
cluster="local"
servers=["{bootstrap}"]
group-blacklist=""
group-whitelist=""
[httpserver.default]
address="127.0.0.1:{port}"
[storage.default]
class-name="inmemory"
intervals=10
min-distance=0
expire-group=604800
[evaluator.default]
class-name="caching"
expire-cache=1
""")
    log = str(root / "burrow.out")
    for attempt in range(3):
        with open(log, "wb") as out:
            proc = subprocess.Popen([BURROW, "-config-dir", str(root)], stdout=out, stderr=subprocess.STDOUT, cwd=root)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return proc, f"http://127.0.0.1:{port}/v3/kafka/local", log
            time.sleep(0.1)
        stop(proc)
        # Burrow 1.2.1's ZooKeeper client sometimes gets EOF from a just-started ZooKeeper 3.8 and exits
        if "cannot create root path" not in open(log, errors="replace").read() or attempt == 2:
            break
    pytest.fail(f"Burrow did not start: {open(log, errors='replace').read()[-2000:]}")


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def poll(fn, what: str, log: str, timeout: float = 30):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except OSError as e:  # urllib's HTTPError too (404 until Burrow knows the group)
            last = e
        else:
            if last:
                return last
        time.sleep(0.25)
    pytest.fail(f"Burrow never showed {what} (last: {last!r}); its log: {open(log, errors='replace').read()[-3000:]}")


def test_burrow_lists_topics_groups_and_the_lag_klog_shows(kafka_server, zookeeper, tmp_path, data_dir):
    from kafka import KafkaProducer

    import klog

    store = klog.open(data_dir)
    store.create_topic("events", partitions=2)
    store.close()
    producer = KafkaProducer(bootstrap_servers=kafka_server.bootstrap)
    for i in range(10):
        producer.send("events", value=b"e%d" % i, partition=i % 2)
    producer.flush()
    producer.close()

    burrow, api, log = start_burrow(tmp_path, kafka_server.bootstrap, zookeeper)
    try:
        topics = poll(lambda: "events" in get(api + "/topic").get("topics", []) and get(api + "/topic")["topics"],
                      "topic 'events'", log)
        assert "events" in topics
        # both partitions' end offsets known to Burrow before the commits it will read
        poll(lambda: get(api + "/topic/events").get("offsets") == [5, 5], "the end offsets of 'events'", log)
        # a Kafka client's commits (through klog serve) and klog's own consumer group (LMDB, no server)
        kafka_python_commit(kafka_server.bootstrap, "billing", {("events", 0): (2, ""), ("events", 1): (4, "")})
        done = run_klog(data_dir, "consume", "events", "-G", "audit", "-n", "3", "-e")
        assert done.returncode == 0, done.stderr

        for group in ("billing", "audit"):
            poll(lambda g=group: g in get(api + "/consumer").get("consumers", []), f"group {group}", log)
            described = run_klog(data_dir, "groups", "describe", group, "--json")
            assert described.returncode == 0, described.stderr
            klog_lag = {(r["topic"], r["partition"]): r["lag"] for r in json.loads(described.stdout)["partitions"]
                        if r.get("committed") is not None}

            def burrow_lag(g: str = group, want: dict = klog_lag) -> dict | None:
                status = get(f"{api}/consumer/{g}/lag")["status"]
                found = {(p["topic"], p["partition"]): p["current_lag"] for p in status["partitions"]
                         if p.get("end") and p["end"]["offset"] >= 0}
                return found if set(found) == set(want) else None

            lag = poll(burrow_lag, f"the lag of group {group}", log)
            assert lag == klog_lag, (group, lag, klog_lag)
        assert klog_lag  # audit committed somewhere
    finally:
        stop(burrow, grace_s=2)  # its state is in the test's ZooKeeper and temp dir: nothing to lose
