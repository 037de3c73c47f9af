#!/usr/bin/env bash
# The whole test suite on a fresh machine: makes .venv (once), installs klog with its test
# extra (and Debian's kcat, the independent Kafka CLI the `klog serve` tests use, when root),
# then runs pytest. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "tests/run.sh: first run: creating .venv and installing klog with pyspark (~3 min, mostly the" \
         "~320 MB pyspark download; pip's progress follows)" >&2
    "$PY" -m venv .venv
    .venv/bin/python -m pip install --progress-bar on --disable-pip-version-check -e '.[test,spark,streams-test]' >&2
else
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,spark,streams-test]'
fi
# quixstreams (the exactly-once stream framework test) caps confluent-kafka below klog's: its own
# dependencies come with the streams-test extra above, quixstreams itself without them
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps 'quixstreams==3.28.1'  # the version its dependencies above were read from
if ! command -v kcat >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "tests/run.sh: installing Debian's kcat for the Kafka-protocol tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat) >/dev/null 2>&1 \
        || echo "tests/run.sh: kcat could not be installed; its tests will fail" >&2
fi
if [ ! -d /usr/share/gocode/src/github.com/Shopify/sarama ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # Debian's Go Kafka clients (sarama 1.22, kafka-go 0.2.1), built offline by the klog serve tests
    echo "tests/run.sh: installing Debian's golang, sarama and kafka-go for the old-client tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go \
        golang-github-shopify-sarama-dev golang-github-segmentio-kafka-go-dev) >/dev/null 2>&1 \
        || echo "tests/run.sh: the Go clients could not be installed; their tests skip" >&2
fi
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # ~40 s once: klog connect's CDC and JDBC tests start a throw-away PostgreSQL server (wal_level=logical)
    echo "tests/run.sh: installing Debian's postgresql for the klog connect tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql) \
        >/dev/null 2>&1 || echo "tests/run.sh: postgresql could not be installed; its tests skip" >&2
fi
if { [ ! -x /usr/bin/Burrow ] || [ ! -e /usr/share/java/zookeeper.jar ]; } && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # Burrow (the consumer-lag monitor, reads __consumer_offsets) and the ZooKeeper it keeps its state in
    echo "tests/run.sh: installing Debian's burrow and zookeeper for the Burrow test" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends burrow \
        zookeeper) >/dev/null 2>&1 || echo "tests/run.sh: burrow/zookeeper could not be installed; its test skips" >&2
fi
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # kafkajs (tests/server/js, installed from the npm registry by its tests) needs Node.js and npm
    echo "tests/run.sh: installing Debian's nodejs and npm for the kafkajs tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) >/dev/null 2>&1 \
        || echo "tests/run.sh: nodejs/npm could not be installed; the kafkajs tests skip" >&2
fi
missing_shells=()
for sh in zsh fish; do command -v "$sh" >/dev/null 2>&1 || missing_shells+=("$sh"); done
if [ ${#missing_shells[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # ~30 s once: tests/test_completion.py runs klog's completion scripts in bash, zsh and fish
    echo "tests/run.sh: installing ${missing_shells[*]} for the completion tests" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_shells[@]}" >/dev/null 2>&1 \
        || echo "tests/run.sh: ${missing_shells[*]} could not be installed; their completion tests skip" >&2
fi
# two workers (pytest-xdist): most of the suite waits on subprocesses, servers and fsyncs, so two
# cores run it in about half the time; --dist loadgroup keeps the Spark tests on one worker (one JVM)
# and the PostgreSQL ones on one (one server). `bash tests/run.sh -n 0` runs it in one process.
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup "$@"
