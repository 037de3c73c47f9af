#!/usr/bin/env bash
# `consume -f` is tail -f for a topic: start a follower in the background that stops after 3
# records (--count), produce 3 records a moment apart, and wait for the follower to finish.
#
#   bash samples/follow.sh                            # in a throwaway data directory
#   KLOG_DATA_DIR=~/klog-demo KLOG="python -m klog" bash samples/follow.sh
set -euo pipefail

read -r -a klog_cmd <<< "${KLOG:-klog}"
klog() { command "${klog_cmd[@]}" "$@"; }
cleanup_dir=
if [ -z "${KLOG_DATA_DIR:-}" ]; then
    KLOG_DATA_DIR=$(mktemp -d "${TMPDIR:-/tmp}/klog-sample.XXXXXX")
    cleanup_dir=$KLOG_DATA_DIR
fi
export KLOG_DATA_DIR
follower=
watchdog=
cleanup() {
    for pid in $follower $watchdog; do kill "$pid" 2>/dev/null || true; done
    if [ -n "$cleanup_dir" ]; then rm -rf "$cleanup_dir"; fi
}
trap cleanup EXIT

topic=sample-follow
klog topics delete --yes "$topic" 2>/dev/null || true
klog topics create "$topic" --partitions 2

# the topic is empty, so reading from the beginning sees exactly the records produced below
klog consume "$topic" --follow --count 3 --format 'follower: %p@%o %k %s\n' &
follower=$!
# a guard for the demo: give up instead of hanging if the follower never gets its 3 records
# (its sleep goes with it, and holds no pipe of ours open meanwhile)
( trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
  sleep 30 & sleeper=$!
  wait "$sleeper" && kill "$follower" 2>/dev/null ) >/dev/null 2>&1 &
watchdog=$!

for event in "user-7:signed in" "user-9:added sku-1042 to the cart" "user-7:checked out"; do
    sleep 0.3
    echo "producing: $event"
    printf '%s\n' "$event" | klog produce "$topic" -K:
done

if wait "$follower"; then
    follower=
    echo "follower stopped after 3 records"
else
    follower=
    echo "follower did not get its 3 records in 30 s" >&2
    exit 1
fi
