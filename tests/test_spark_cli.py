"""`klog spark export|sql|run|stream` as a user runs them.

Goal: exported files hold exactly the topic's records (count and content, per format, per range);
SQL sees topics as views with JSON fields as columns; a PySpark script runs against the store;
a stream job resumes from its checkpoint; every failure is one line on stderr and a non-zero exit.
Method: commands run in-process through the `cli` fixture (sharing the session-scoped `spark`
fixture, so Spark starts once); files are read back with pyarrow and the csv/json modules and
compared with the Python consumer. Missing Java runs in a real subprocess with java off PATH.
"""

from __future__ import annotations

import csv
import datetime as dt
import glob
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


pytestmark = pytest.mark.spark

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@pytest.fixture
def orders(store, spark):
    """3 partitions x 30 JSON records; record i has timestamp T0 + 60 s * i (2023-11-14 and -15, UTC)."""
    store.create_topic("orders", partitions=3)
    with store.producer() as producer:
        for p in range(3):
            for i in range(30):
                value = json.dumps({"id": p * 100 + i, "name": f"n{i}", "amount": i * 1.5}).encode()
                producer.send("orders", value, key=None if i % 7 == 0 else f"c{i % 4}".encode(), partition=p,
                              timestamp=T0 + 3_600_000 * i, headers=[("trace", f"t{i}".encode())] if i % 10 == 0
                              else None)
    return store


def expected(store, topic: str = "orders", keep=lambda r: True) -> list[tuple]:  # noqa: ANN001
    return sorted((r.partition, r.offset, r.timestamp, None if r.key is None else r.key.decode(), r.value.decode())
                  for r in store.consumer(topic, merge=False) if keep(r))


def _ms(value) -> int:  # noqa: ANN001 - datetime or ISO text
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return round(value.timestamp() * 1000)


def read_back(out: str, fmt: str) -> list[tuple]:
    """(partition, offset, timestamp ms, key, value) rows of an export, read without Spark."""
    rows = []
    if fmt in ("parquet", "orc"):
        import pyarrow.dataset as ds

        for r in ds.dataset(out, format=fmt).to_table().to_pylist():
            rows.append((r["partition"], r["offset"], _ms(r["timestamp"]), r["key"], r["value"]))
    elif fmt == "json":
        for path in glob.glob(os.path.join(out, "part-*")):
            with open(path) as f:
                for line in f:
                    r = json.loads(line)
                    rows.append((r["partition"], r["offset"], _ms(r["timestamp"]), r.get("key"), r["value"]))
    else:
        for path in glob.glob(os.path.join(out, "part-*")):
            with open(path, newline="") as f:
                for r in csv.DictReader(f):
                    rows.append((int(r["partition"]), int(r["offset"]), _ms(r["timestamp"]), r["key"] or None,
                                 r["value"]))
    return sorted(rows)


def headers_back(out: str, fmt: str) -> list[tuple]:
    if fmt == "json":
        rows = [json.loads(line) for path in glob.glob(os.path.join(out, "part-*")) for line in open(path)]
    else:
        import pyarrow.dataset as ds

        rows = ds.dataset(out, format=fmt).to_table().to_pylist()
    return sorted((r["partition"], r["offset"], [(h["key"], h["value"]) for h in r["headers"]]) for r in rows)


@pytest.mark.parametrize("fmt", ["parquet", "json", "csv", "orc"])
def test_export_each_format_reads_back_exactly(cli, orders, tmp_path, fmt) -> None:
    out = str(tmp_path / f"out-{fmt}")
    result = cli("spark", "export", "orders", "--to", fmt, "--out", out, "--master", "local[2]")
    assert result.exit_code == 0, result.stderr
    assert read_back(out, fmt) == expected(orders)
    if fmt != "csv":  # CSV has no column for a list
        assert headers_back(out, fmt) == sorted((r.partition, r.offset, [(k, v.decode()) for k, v in r.headers])
                                                for r in orders.consumer("orders", merge=False))
    files = [p for p in glob.glob(os.path.join(out, "part-*"))]
    size = sum(os.path.getsize(p) for p in files)
    assert f"exported 90 records to {out}: {len(files)} files" in result.stderr
    assert size > 0


def test_export_range_options_choose_the_records(cli, orders, tmp_path) -> None:
    out = str(tmp_path / "range")
    until = dt.datetime.fromtimestamp((T0 + 3_600_000 * 25) / 1000, dt.UTC).isoformat()
    result = cli("spark", "export", "orders", "--out", out, "-p", "1", "-p", "2", "-o", "10", "--until", until)
    assert result.exit_code == 0, result.stderr
    assert read_back(out, "parquet") == expected(orders, keep=lambda r: r.partition > 0 and 10 <= r.offset < 25)
    out2 = str(tmp_path / "tail")
    assert cli("spark", "export", "orders", "--out", out2, "-o", "-3").exit_code == 0
    assert read_back(out2, "parquet") == expected(orders, keep=lambda r: r.offset >= 27)


def test_export_json_values_become_columns_partitioned_by_date(cli, orders, tmp_path) -> None:
    import pyarrow.dataset as ds

    out = str(tmp_path / "json")
    result = cli("spark", "export", "orders", "--out", out, "--value-format", "json", "--partition-by", "date")
    assert result.exit_code == 0, result.stderr
    folders = sorted(n for n in os.listdir(out) if not n.startswith(("_", ".")))
    assert folders == ["date=2023-11-14", "date=2023-11-15", "date=2023-11-16"]
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert {"amount", "id", "name", "_key", "_partition", "_offset", "_timestamp", "date"} == set(table.column_names)
    got = sorted((r["_partition"], r["_offset"], r["id"], r["name"], r["amount"], r["_key"])
                 for r in table.to_pylist())
    want = sorted((r.partition, r.offset, *json.loads(r.value).values(), r.key and r.key.decode())
                  for r in orders.consumer("orders", merge=False))
    assert got == [(p, o, i, n, a, k) for p, o, i, n, a, k in want]


def test_export_json_with_a_given_schema(cli, orders, tmp_path) -> None:
    import pyarrow.dataset as ds

    out = str(tmp_path / "schema")
    result = cli("spark", "export", "orders", "--out", out, "--value-format", "json", "--schema", "id INT")
    assert result.exit_code == 0, result.stderr
    table = ds.dataset(out, format="parquet").to_table()
    assert sorted(table.column("id").to_pylist()) == sorted(p * 100 + i for p in range(3) for i in range(30))
    assert "name" not in table.column_names


def test_sql_json_lines_on_a_pipe(cli, orders) -> None:
    result = cli("spark", "sql", "SELECT name, count(*) AS n, sum(amount) AS total FROM orders "
                 "WHERE id % 100 < 3 GROUP BY name ORDER BY name")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.out.splitlines()]
    assert rows == [{"name": f"n{i}", "n": 3, "total": 3 * i * 1.5} for i in range(3)]


def test_sql_joins_topics_and_writes_a_topic(cli, orders, store) -> None:
    with store.producer() as producer:
        for c in range(4):
            producer.send("customers", json.dumps({"cid": f"c{c}", "city": f"city{c}"}).encode())
    query = ("SELECT c.city, count(*) AS orders FROM orders o JOIN customers c ON o._key = c.cid "
             "GROUP BY c.city ORDER BY c.city")
    result = cli("spark", "sql", query, "--to-topic", "city-counts")
    assert result.exit_code == 0, result.stderr
    assert "produced 4 records to city-counts" in result.stderr
    keyed = [r for r in orders.consumer("orders") if r.key is not None]
    want = {f"city{c}": sum(1 for r in keyed if r.key == f"c{c}".encode()) for c in range(4)}
    got = {json.loads(r.value)["city"]: json.loads(r.value)["orders"] for r in store.consumer("city-counts")}
    assert got == want


def test_sql_text_topics_and_backquoted_names(cli, store, spark) -> None:
    with store.producer() as producer:
        for word in ("b", "a", "c"):
            producer.send("web-log", word.encode())
    result = cli("spark", "sql", "SELECT value FROM `web-log` ORDER BY value")
    assert result.exit_code == 0, result.stderr
    assert [json.loads(line)["value"] for line in result.out.splitlines()] == ["a", "b", "c"]


def test_run_a_pyspark_script(cli, store, spark) -> None:
    with store.producer() as producer:
        for i in range(30):
            producer.send("hits", json.dumps({"path": f"/p{i % 3}", "status": 500 if i % 5 == 0 else 200,
                                              "bytes": 10}).encode())
    result = cli("spark", "run", os.path.join(REPO, "samples", "spark_job.py"), "hits", "path-stats")
    assert result.exit_code == 0, result.stderr
    assert result.out.splitlines()[0].split() == ["/p0", "10", "hits", "2", "errors", "100", "bytes"]
    stats = {r.key: json.loads(r.value) for r in store.consumer("path-stats")}
    assert stats[b"/p1"] == {"path": "/p1", "hits": 10, "errors": 2, "bytes": 100}
    assert len(stats) == 3


def test_run_passes_the_scripts_exit_code(cli, tmp_path, spark) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint(spark.range(3).count())\nsys.exit(3)\n")
    result = cli("spark", "run", str(script))
    assert (result.exit_code, result.out) == (3, "3\n")


def test_stream_available_now_twice_with_records_in_between(cli, store, spark) -> None:
    def produce(start: int, stop: int) -> None:
        with store.producer() as producer:
            for i in range(start, stop):
                producer.send("events", json.dumps({"n": i}).encode(), key=f"k{i % 3}".encode())

    store.create_topic("events", partitions=2)
    produce(0, 25)
    args = ("spark", "stream", "--from", "events", "--to", "doubled", "--available-now", "--sql",
            "SELECT key, to_json(named_struct('n', get_json_object(value, '$.n') * 2)) AS value FROM events")
    first = cli(*args)
    assert first.exit_code == 0, first.stderr
    assert "streamed 25 records" in first.stderr
    produce(25, 40)
    second = cli(*args)
    assert second.exit_code == 0, second.stderr
    assert "streamed 15 records" in second.stderr
    got = sorted((r.key, json.loads(r.value)["n"]) for r in store.consumer("doubled"))
    assert got == sorted((f"k{i % 3}".encode(), 2 * i) for i in range(40))


@pytest.mark.parametrize(("args", "code", "message"), [
    (("export", "nope", "--out", "x"), 1, "klog: error: unknown topic 'nope'"),
    (("export", "orders", "--out", "x", "--to", "xml"), 2, "klog: error: invalid --to 'xml': use parquet, json"),
    (("export", "orders", "--out", "x", "--to", "csv", "--value-format", "binary"), 2, "CSV cannot hold binary"),
    (("export", "orders", "--out", "x", "--partition-by", "weekday"), 2, "cannot partition by 'weekday'"),
    (("export", "orders", "--out", "x", "--conf", "spark.driver.memory"), 2, "invalid --conf 'spark.driver.memory'"),
    (("sql", "SELEC 1"), 1, "klog: error: Spark: "),
    (("sql", "SELECT nope FROM orders"), 1, "klog: error: Spark: "),
    (("stream", "--from", "nope", "--to", "b", "--sql", "SELECT value FROM source"), 1, "unknown topic 'nope'"),
    (("run", "no-such-script.py"), 2, "klog: error: no such script: no-such-script.py"),
])
def test_errors_are_one_line(cli, orders, args, code, message) -> None:
    result = cli("spark", *args)
    assert result.exit_code == code, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_export_refuses_to_overwrite_without_asking(cli, orders, tmp_path) -> None:
    out = tmp_path / "exists"
    out.mkdir()
    result = cli("spark", "export", "orders", "--out", str(out))
    assert (result.exit_code, result.stderr.strip()) == (2, f"klog: error: {out} exists: choose another --out or "
                                                            "add --overwrite")
    assert cli("spark", "export", "orders", "--out", str(out), "--overwrite").exit_code == 0
    assert len(read_back(str(out), "parquet")) == 90


def _subprocess(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "klog", *args], capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": REPO})


def test_missing_java_is_one_line(data_dir) -> None:
    bare = {"PATH": os.path.dirname(sys.executable), "KLOG_DATA_DIR": data_dir, "HOME": os.environ.get("HOME", "/")}
    for extra, message in (({}, "Java not found: klog spark needs Java 17 or later"),
                           ({"JAVA_HOME": "/nonexistent"}, "JAVA_HOME is /nonexistent but it has no bin/java")):
        result = _subprocess(["spark", "sql", "SELECT 1"], {**bare, **extra})
        assert result.returncode == 1
        assert result.stderr.strip().splitlines() == [f"klog: error: {result.stderr.strip()[13:]}"]
        assert message in result.stderr


def test_spark_help_does_not_import_spark(data_dir) -> None:
    code = ("import sys\nfrom klog.cli.app import run\nrun(['spark', '--help'])\n"
            "print(sorted(m for m in ('pyspark', 'pyarrow', 'pandas') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": REPO})
    assert "export" in result.stdout and result.stdout.strip().endswith("[]")


def test_missing_pyspark_is_one_line(data_dir) -> None:
    code = ("import sys\nsys.modules['pyspark'] = None  # as if the spark extra were not installed\n"
            "from klog.cli.app import run\nsys.exit(run(['spark', 'sql', 'SELECT 1']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": REPO, "KLOG_DATA_DIR": data_dir})
    assert result.returncode == 1
    assert result.stderr == ("klog: error: pyspark not installed: klog spark needs the spark extra "
                             "(pip install 'klog[spark]')\n")


def test_stream_with_a_script_in_bounded_batches(cli, store, spark, tmp_path) -> None:
    script = tmp_path / "job.py"
    script.write_text("from pyspark.sql import functions as F\n\n\ndef transform(df):\n"
                      "    return df.where(F.col('value') != 'skip').select(F.lit('x').alias('key'), 'value')\n")
    with store.producer() as producer:
        for i in range(30):
            producer.send("words", b"skip" if i % 3 == 0 else f"w{i}".encode(), partition=0)
    result = cli("spark", "stream", "--from", "words", "--to", "kept", "--script", str(script), "--available-now",
                 "--max-records-per-batch", "10", "--checkpoint", str(tmp_path / "ckpt"))
    assert result.exit_code == 0, result.stderr
    assert "streamed 30 records in 3 batches" in result.stderr
    assert [(r.key, r.value) for r in store.consumer("kept")] == [(b"x", f"w{i}".encode()) for i in range(30)
                                                                   if i % 3]
    assert os.path.isdir(tmp_path / "ckpt" / "offsets")
