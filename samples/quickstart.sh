#!/usr/bin/env bash
# The README's first command on a fresh machine:
#
#   bash samples/quickstart.sh
#
# Finds klog (or installs it into .venv at the repository root), then, in your default data directory
# (~/.local/share/klog, or $KLOG_DATA_DIR if you set it), creates topic quickstart-access, produces the
# sample access log into it, describes it, tails it, shows its offsets and exports it to
# ./quickstart-out/export.jsonl and (with Java and the spark extra) to Parquet files in
# ./quickstart-out/parquet (quickstart-out/ is in .gitignore; QUICKSTART_OUT picks another folder).
# Each run appends another 2,000 records to the topic.
#
# KLOG="python -m klog" picks the command to run and skips the install step.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-python3}
if [ -n "${KLOG:-}" ]; then
    read -r -a klog_cmd <<< "$KLOG"
elif [ -x "$repo/.venv/bin/klog" ]; then
    klog_cmd=("$repo/.venv/bin/klog")
elif "$py" -c 'import klog.cli.app' 2>/dev/null; then
    klog_cmd=("$py" -m klog)
else
    echo "klog is not installed: installing it with pyspark into $repo/.venv (once; ~3 min, mostly the" \
         "~320 MB pyspark download)" >&2
    [ -x "$repo/.venv/bin/python" ] || "$py" -m venv "$repo/.venv"
    # with the spark extra: the last step exports Parquet through Spark (Java 17 is the one other need);
    # pip's own progress on a terminal, so the wait is never silent
    quiet=(-q); [ -t 2 ] && quiet=(--progress-bar on)
    "$repo/.venv/bin/python" -m pip install "${quiet[@]}" --disable-pip-version-check -e "$repo[spark]" >&2
    klog_cmd=("$repo/.venv/bin/klog")
fi
klog() { command "${klog_cmd[@]}" "$@"; }

topic=quickstart-access
out=${QUICKSTART_OUT:-quickstart-out}
mkdir -p "$out"
step() { printf '\n$ klog %s\n' "$*"; }

step topics create "$topic" --partitions 3 --if-not-exists
klog topics create "$topic" --partitions 3 --if-not-exists

step produce "$topic" samples/access-log.jsonl
klog produce "$topic" "$repo/samples/access-log.jsonl"

step topics describe "$topic"
klog topics describe "$topic"

step consume "$topic" --tail 5
klog consume "$topic" --tail 5

step offsets "$topic"
klog offsets "$topic"

step consume "$topic" --json '>' "$out/export.jsonl"
klog consume "$topic" --json > "$out/export.jsonl"
echo "exported $(wc -l < "$out/export.jsonl" | tr -d ' ') records to $out/export.jsonl"

# Parquet through Spark: needs Java 17+ and the spark extra (installed above; pip install 'klog[spark]'
# elsewhere); ~12 s to start Spark, ~25 s more the very first time
step spark export "$topic" --value-format json --to parquet --out "$out/parquet" --overwrite
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
    echo "skipped: klog spark needs Java 17 or later (e.g. apt install openjdk-17-jre-headless)"
elif ! klog spark export "$topic" --value-format json --to parquet --out "$out/parquet" --overwrite; then
    echo "skipped the Parquet export (the line above says why)"
fi

# consumer groups: read part of the topic as group quickstart-readers, then see its lag per partition
step consume "$topic" --group quickstart-readers -n 500 '>' /dev/null
klog consume "$topic" --group quickstart-readers -n 500 > /dev/null
step groups describe quickstart-readers
klog groups describe quickstart-readers
