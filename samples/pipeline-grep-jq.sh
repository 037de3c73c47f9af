#!/usr/bin/env bash
# klog in a Unix pipeline: produce a web access log, filter it with grep and jq, produce the result
# into another topic, and copy a topic losslessly with `consume --json | produce --input json`.
#
#   bash samples/pipeline-grep-jq.sh                  # in a throwaway data directory
#   KLOG_DATA_DIR=~/klog-demo bash samples/pipeline-grep-jq.sh
#   KLOG="python -m klog" bash samples/pipeline-grep-jq.sh
#
# It deletes and recreates its own topics (sample-access, sample-errors, sample-access-copy) so it can
# be run again. jq is optional: without it the filter step uses grep alone.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
read -r -a klog_cmd <<< "${KLOG:-klog}"
klog() { command "${klog_cmd[@]}" "$@"; }
if [ -z "${KLOG_DATA_DIR:-}" ]; then
    KLOG_DATA_DIR=$(mktemp -d "${TMPDIR:-/tmp}/klog-sample.XXXXXX")
    trap 'rm -rf "$KLOG_DATA_DIR"' EXIT
fi
export KLOG_DATA_DIR
count() { wc -l | tr -d ' '; }

access=sample-access
errors=sample-errors
copy=sample-access-copy
for topic in "$access" "$errors" "$copy"; do
    klog topics delete --yes "$topic" 2>/dev/null || true
done

# -- 1. produce: one record per line, no keys ------------------------------------------------------
# Unkeyed records go to one partition per batch (Kafka's sticky partitioner); with Kafka's default
# batch.size of 16 KiB the 470 KB log spreads over all 3 partitions instead of filling one batch.
klog topics create "$access" --partitions 3
klog produce "$access" --batch-size 16384 "$here/access-log.jsonl"
total=$(klog consume "$access" | count)
echo "produced: $total records into $access"

# -- 2. grep: on a pipe `consume` prints each value alone on a line, so text tools just work --------
server_errors='"status": 5[0-9][0-9]'
by_grep=$(klog consume "$access" | { grep -E "$server_errors" || true; } | count)
by_consume_grep=$(klog consume "$access" --grep "$server_errors" | count)
echo "server errors: grep $by_grep, consume --grep $by_consume_grep"
if [ "$by_grep" != "$by_consume_grep" ]; then
    echo "grep and consume --grep disagree" >&2
    exit 1
fi

# -- 3. jq: reshape the 5xx records and produce them into another topic, keyed by request path ------
klog topics create "$errors" --partitions 3
if command -v jq >/dev/null 2>&1; then
    klog consume "$access" \
        | jq -r 'select(.status >= 500) | "\(.path)\t\({ts, ip, method, path, status} | tojson)"' \
        | klog produce "$errors" --key-separator $'\t'
    echo "top status codes (jq):"
    klog consume "$access" | jq -r .status | sort | uniq -c | sort -rn | head -5
else
    echo "jq not found: skipping the jq steps; $errors gets grep's lines, unkeyed"
    klog consume "$access" --grep "$server_errors" | klog produce "$errors"
fi
echo "errors topic: $(klog consume "$errors" | count) records in $errors"
echo "first three (partition, key, value):"
klog consume "$errors" --count 3 --format '  %p  %k  %s\n'

# -- 4. round trip: the JSON envelope keeps key, value, headers, timestamp and partition -----------
klog topics create "$copy" --partitions 3
klog consume "$access" --json | klog produce "$copy" --input json
copied=$(klog consume "$copy" | count)
fmt='%p %o %T %k %s\n'
if diff <(klog consume "$access" --format "$fmt" | sort) <(klog consume "$copy" --format "$fmt" | sort) >/dev/null
then
    echo "round trip: $total -> $copied records, identical (partition, offset, timestamp, key, value)"
else
    echo "round trip: $total -> $copied records, CONTENT DIFFERS" >&2
    exit 1
fi
