#!/usr/bin/env bash
# Keys pick partitions: produce sensor readings `sensor-id:{json}` with `-K:` into a 6-partition topic
# and show that every reading of a sensor lands in the same partition (Kafka's murmur2 partitioner),
# so per-sensor order is kept.
#
#   bash samples/keyed-partitions.sh                  # in a throwaway data directory
#   KLOG_DATA_DIR=~/klog-demo KLOG="python -m klog" bash samples/keyed-partitions.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
read -r -a klog_cmd <<< "${KLOG:-klog}"
klog() { command "${klog_cmd[@]}" "$@"; }
if [ -z "${KLOG_DATA_DIR:-}" ]; then
    KLOG_DATA_DIR=$(mktemp -d "${TMPDIR:-/tmp}/klog-sample.XXXXXX")
    trap 'rm -rf "$KLOG_DATA_DIR"' EXIT
fi
export KLOG_DATA_DIR

topic=sample-sensors
klog topics delete --yes "$topic" 2>/dev/null || true
klog topics create "$topic" --partitions 6
# the key is everything before the first ':'; the JSON value keeps its own colons
klog produce "$topic" -K: "$here/sensors.txt"
echo "produced: $(klog consume "$topic" | wc -l | tr -d ' ') readings"

echo "partition key:"
pairs=$(klog consume "$topic" --format '%p %k\n' | sort -u)
printf '%s\n' "$pairs"

keys=$(printf '%s\n' "$pairs" | awk '{print $2}' | sort -u | wc -l | tr -d ' ')
used=$(printf '%s\n' "$pairs" | awk '{print $1}' | sort -u | wc -l | tr -d ' ')
split=$(printf '%s\n' "$pairs" | awk '{print $2}' | sort | uniq -d)
if [ -n "$split" ]; then
    echo "keys found in more than one partition: $split" >&2
    exit 1
fi
echo "$keys keys in $used of 6 partitions: each key stays in one partition"

echo "records per partition:"
klog offsets "$topic"
