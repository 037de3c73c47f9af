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

from tests.conftest import REPO  # noqa: E402 - after the importorskip

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


def test_run_a_failing_script_shows_its_own_traceback(cli, tmp_path, spark) -> None:
    """As `python script.py` would: the script's frames and error, exit 1; not klog's CLI frames."""
    script = tmp_path / "fails.py"
    script.write_text("def step():\n    raise ValueError('bad row 7')\n\nstep()\n")
    result = cli("spark", "run", str(script))
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[-1] == "ValueError: bad row 7"
    assert str(script) in lines[1] and "raise ValueError" in result.stderr
    assert "klog/cli" not in result.stderr and "runpy" not in result.stderr
    script.write_text("spark.sql('SELEC 1').collect()\n")  # a Spark error stays klog's one line
    result = cli("spark", "run", str(script))
    assert result.exit_code == 1 and result.stderr.startswith("klog: error: Spark: ")
    assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize(("code", "error", "line"), [
    ("spark.sparkContext.parallelize([1], 1).map(lambda x: 1 / 0).count()\n",
     "ZeroDivisionError: division by zero", 1),
    ("from pyspark.sql import functions as F\n\n\ndef parse(x):\n    return int('z' + str(x))\n\n\n"
     "spark.range(1).select(F.udf(parse)('id')).collect()\n",
     "ValueError: invalid literal for int() with base 10: 'z0'", 5),
])
def test_run_an_error_in_a_python_worker_names_it(cli, tmp_path, spark, code, error, line) -> None:
    """The script's own code failing in a Spark task: the one line says which error and where (it said
    only "Spark: An exception was thrown from the Python worker:")."""
    script = tmp_path / "job.py"
    script.write_text(code)
    result = cli("spark", "run", str(script))
    assert (result.exit_code, result.stderr) == (
        1, f"klog: error: Spark: a Python worker failed: {error} ({script}, line {line})\n")


STOPPED_THEN_JVM_ERROR = """\
import signal
try:
    {stop}
finally:  # clean-up code calling the JVM while the stop unwinds (PySpark's own does), and failing
    spark.sparkContext._jvm.java.lang.Integer.parseInt("not a number")
"""


@pytest.mark.parametrize(("stop", "code", "line"), [
    ("signal.raise_signal(signal.SIGTERM)", 143, "klog: terminated"),
    ("signal.raise_signal(signal.SIGINT)", 130, "klog: interrupted"),
    ("pass", 1, 'klog: error: Spark: For input string: "not a number"'),  # no signal: the error is the error
])
def test_run_a_stop_signal_wins_over_the_jvm_errors_that_follow_it(cli, tmp_path, spark, stop, code, line) -> None:
    """SIGTERM or Ctrl-C during a job: the KeyboardInterrupt unwinds through clean-up code whose JVM calls
    fail (the interrupted call's connections are shut down: "Answer from Java side is empty"); the command
    still ends as stopped, one line, 143 or 130 (it exited 1 with the JVM's error, once in ~10 runs)."""
    script = tmp_path / "stopped.py"
    script.write_text(STOPPED_THEN_JVM_ERROR.format(stop=stop))
    result = cli("spark", "run", str(script))
    assert (result.exit_code, result.stderr) == (code, line + "\n")
    assert spark.range(2).count() == 2  # the shared session still works


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
    # a failure inside a task: the Java exception's innermost cause, not "An error occurred while calling o102..."
    (("sql", "SELECT assert_true(1 < 0)"), 1, "klog: error: Spark: '(1 < 0)' is not true!"),
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


def test_missing_pyarrow_is_one_clear_line(monkeypatch, data_dir, cli) -> None:
    """pyspark installed without pyarrow: the check names pyarrow alone, before any JVM starts."""
    from klog.errors import SparkUnavailableError
    from klog.spark.java import require_pyspark

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(SparkUnavailableError) as info:
        require_pyspark()
    assert str(info.value) == "pyarrow not installed: klog spark needs the spark extra (pip install 'klog[spark]')"
    result = cli("spark", "sql", "SELECT 1")
    assert (result.exit_code, result.stdout, result.stderr) == (1, b"", f"klog: error: {info.value}\n")


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


@pytest.mark.parametrize(("code", "line"), [
    ("def transform(df):\n    return df.where(bad(df))\n\n\ndef bad(df):\n    raise ValueError('no good')\n",
     "--script {script}, line 6: ValueError: no good"),
    ("def transform(df:\n", "--script {script}, line 1: SyntaxError: '(' was never closed"),
    ("import nosuchmodule\n", "--script {script}, line 1: ModuleNotFoundError: No module named 'nosuchmodule'"),
])
def test_stream_a_failing_script_is_one_line(cli, store, spark, tmp_path, code, line) -> None:
    """The --script's own error: one line naming the script, its line and the error (it was Python's
    traceback through klog's frames, exit 1)."""
    store.create_topic("words", partitions=1)
    script = tmp_path / "job.py"
    script.write_text(code)
    result = cli("spark", "stream", "--from", "words", "--to", "kept", "--script", str(script), "--available-now",
                 "--checkpoint", str(tmp_path / "ckpt"))
    assert (result.exit_code, result.stderr) == (1, f"klog: error: {line.format(script=script)}\n")


def _no_java_env(data_dir: str) -> dict:
    """No java on PATH and a JAVA_HOME without one: a command that needs Java fails with 'Java ...'."""
    return {"PATH": os.path.dirname(sys.executable), "KLOG_DATA_DIR": data_dir, "HOME": os.environ.get("HOME", "/"),
            "JAVA_HOME": "/nonexistent"}


@pytest.mark.parametrize(("args", "code", "message"), [
    (["export", "t", "--out", "{tmp}/x", "--to", "xml"], 2, "invalid --to 'xml': use parquet, json"),
    (["export", "t", "--out", "{tmp}/x", "--value-format", "yaml"], 2, "invalid --value-format 'yaml'"),
    (["export", "nope", "--out", "{tmp}/x"], 1, "unknown topic 'nope'"),
    (["export", "t", "--out", "{tmp}"], 2, "exists: choose another --out or add --overwrite"),
    (["sql", "SELECT 1", "--value-format", "yaml"], 2, "invalid --value-format 'yaml'"),
    (["sql", "SELECT 1", "--out", "{tmp}/x", "--to", "xml"], 2, "invalid --to 'xml'"),
    (["sql", "SELECT 1", "--out", "{tmp}"], 2, "exists: choose another --out or add --overwrite"),
    (["stream", "--from", "t", "--to", "u", "--sql", "SELECT value FROM source", "--starting-offsets", "soon"], 2,
     "invalid --starting-offsets 'soon'"),
    (["stream", "--from", "nope", "--to", "u", "--sql", "SELECT value FROM source"], 1, "unknown topic 'nope'"),
    (["stream", "--from", "t", "--to", "u"], 2, "give one of --sql and --script"),
    (["run", "{tmp}/no-such-script.py"], 2, "no such script"),
    (["sql", "SELECT 1", "--master", "local[two]"], 2, "invalid --master 'local[two]'"),
    # before, Spark started and failed later (or, for 0 records per batch, the cap was dropped)
    (["stream", "--from", "t", "--to", "u", "--sql", "SELECT value FROM source", "--trigger-seconds", "-1"], 2,
     "invalid --trigger-seconds '-1': use 0 or more seconds"),
    (["stream", "--from", "t", "--to", "u", "--sql", "SELECT value FROM source", "--max-records-per-batch", "0"], 2,
     "invalid --max-records-per-batch '0': use 1 or more"),
    (["stream", "--from", "t", "--to", "u v", "--sql", "SELECT value FROM source"], 2,
     "topic name 'u v' has illegal characters (' ')"),
    (["sql", "SELECT 1 AS value", "--to-topic", "u/v"], 2, "topic name 'u/v' has illegal characters ('/')"),
])
def test_option_errors_come_before_java(store, data_dir, tmp_path, args, code, message) -> None:
    """Bad options and unknown topics are reported before the JVM would start (~15 s): even without Java."""
    store.create_topic("t", partitions=1)
    result = _subprocess([a.replace("{tmp}", str(tmp_path)) for a in ["spark", *args]], _no_java_env(data_dir))
    assert result.returncode == code, result.stderr
    assert message in result.stderr and "Java" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("args", [
    ["stream", "--from", "t", "--to", "missing", "--sql", "SELECT value FROM source"],
    ["sql", "SELECT 1 AS value", "--to-topic", "missing"],
])
def test_a_target_topic_that_cannot_be_created_is_one_line_before_java(store, data_dir, args) -> None:
    """With auto.create.topics.enable false, a missing --to / --to-topic would fail at the first write."""
    import json

    store.create_topic("t", partitions=1)
    path = os.path.join(data_dir, "klog.json")
    with open(path) as f:
        doc = json.load(f)
    doc["defaults"] = {"auto.create.topics.enable": "false"}
    with open(path, "w") as f:
        json.dump(doc, f)
    result = _subprocess(["spark", *args], _no_java_env(data_dir))
    assert result.returncode == 1, result.stderr
    assert result.stderr == ("klog: error: unknown topic 'missing' (auto.create.topics.enable is false: "
                             "create it first)\n")


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--master", "bogus"], 2, "klog: error: invalid --master 'bogus': use local, local[N]"),
    (["--conf", "spark.driver.memory=lots"], 1, "klog: error: Spark's JVM did not start: Invalid maximum heap size: "
                                                "-Xmxlots"),
    (["--conf", "spark.executor.memory=lots"], 1, "klog: error: Spark's JVM did not start: Executor memory must be "
                                                  "a positive number"),
])
def test_a_spark_that_cannot_start_is_one_line(store, data_dir, args, code, message) -> None:
    """Spark's launcher would print a JVM stack trace (bad master) or JVM lines (bad heap size)."""
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "KLOG_SPARK_CDS": "0"}  # no "recording classes" line
    result = _subprocess(["spark", "sql", "SELECT 1 AS x", "--master", "local[1]", *args], env)
    assert result.returncode == code
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(message), result.stderr
    assert "at org." not in result.stderr and result.stdout == ""


def test_jvm_noise_lines_go_and_progress_passes_at_once() -> None:
    """Spark's progress bar is `\\r` + bar with no newline: it must pass as it comes, not wait for a line end."""
    from klog.spark.launch import NoiseFilter

    f = NoiseFilter()
    bar = b"\r[Stage 0:>                                        (0 + 1) / 2]"
    assert f.feed(bar) == bar
    assert f.feed(b"\r[Stage 0:=====>   (1 + 1) / 2]\r") == b"\r[Stage 0:=====>   (1 + 1) / 2]\r"
    assert f.feed(b"WARNING: Using incubator modules: jdk.incubator.vector\n") == b""
    assert f.feed(b"WARNING: Using incu") == b""  # may still become a noise line: held
    assert f.feed(b"bator modules: jdk.incubator.vector\n12:00:00 WARN X: kept\n") == b"12:00:00 WARN X: kept\n"
    assert f.feed(b"\r[Stage 1:>  (0 + 1) / 2]\rWARNING: Using incubator modules\n") == b"\r[Stage 1:>  (0 + 1) / 2]\r"
    assert f.feed(b"no newline yet") == b"" and f.flush() == b"no newline yet"


def _read_available(fd: int) -> bytes:
    import select

    ready, _, _ = select.select([fd], [], [], 60)  # a guard against a hang, not a timing check
    return os.read(fd, 65536) if ready else b""


def test_stderr_pump_forwards_progress_chunks_through_a_pipe() -> None:
    from klog.spark.launch import StderrPump

    jvm_r, jvm_w = os.pipe()
    tty_r, tty_w = os.pipe()
    pump = StderrPump(jvm_r, tty_w).start()
    os.write(jvm_w, b"WARNING: Using incubator modules: jdk.incubator.vector\n12:00:00 WARN Utils: held\n")
    pump.release()  # the JVM is up: what it said while starting goes out, without the noise
    assert _read_available(tty_r) == b"12:00:00 WARN Utils: held\n"
    for done in range(3):
        chunk = f"\r[Stage 0:>   ({done} + 1) / 3]".encode()
        os.write(jvm_w, chunk)
        assert _read_available(tty_r) == chunk
    os.close(jvm_w)
    pump.thread.join()
    os.close(tty_r)
    os.close(tty_w)


def test_a_failed_start_keeps_only_the_first_real_error() -> None:
    from klog.spark.launch import StderrPump, launch_error, launch_failure_line

    jvm_r, jvm_w = os.pipe()
    tty_r, tty_w = os.pipe()
    pump = StderrPump(jvm_r, tty_w).start()
    os.write(jvm_w, b"WARNING: Using incubator modules: jdk.incubator.vector\nInvalid maximum heap size: -Xmxlots\n"
                    b"Error: Could not create the Java Virtual Machine.\n"
                    b"Error: A fatal exception has occurred. Program will exit.\n")
    os.close(jvm_w)  # the JVM exited
    text = pump.drop(wait_for_eof=True)
    assert str(launch_error(text)) == "Spark's JVM did not start: Invalid maximum heap size: -Xmxlots"
    os.set_blocking(tty_r, False)
    with pytest.raises(BlockingIOError):  # nothing reached the terminal
        os.read(tty_r, 100)
    os.close(tty_r)
    os.close(tty_w)
    trace = ('Exception in thread "main" org.apache.spark.SparkException: Master must either be yarn or start with '
             "spark, k8s, or local\n\tat org.apache.spark.deploy.SparkSubmit.error(SparkSubmit.scala:1068)\n")
    assert launch_failure_line(trace) == "Master must either be yarn or start with spark, k8s, or local"
    assert launch_failure_line("Error: Unrecognized option: --bogus\n\nUsage: spark-submit [options]\n") == \
        "Unrecognized option: --bogus"
    assert str(launch_error("")).startswith("Spark's JVM exited while starting")


def test_master_urls() -> None:
    from klog.errors import UsageError
    from klog.spark.launch import check_master, is_local

    for good in ("local", "local[4]", "local[*]", "local[2,3]", "local[*, 2]", "local-cluster[2, 1, 1024]",
                 "spark://head:7077", "spark://a:7077,b:7077", "yarn", "k8s://https://k8s.example:443"):
        check_master(good)
    for bad in ("bogus", "local[0]", "local[two]", "local[", "spark://", "yarn-client", "mesos://m:5050", ""):
        with pytest.raises(UsageError, match="invalid --master"):
            check_master(bad)
    assert is_local("local[2]") and is_local("local-cluster[2,1,1024]") and not is_local("spark://h:7077")


def test_only_a_local_driver_is_pinned_to_loopback(monkeypatch, tmp_path) -> None:
    """On a cluster, executors connect back to the driver: no SPARK_LOCAL_IP / driver host of 127.0.0.1."""
    from klog.spark.session import SessionSettings, _builder_conf, _prepare_environment

    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "KLOG_DATA_DIR", "SPARK_LOCAL_DIRS",
                 "KLOG_SPARK_STAGING"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    for master in ("spark://head:7077", "yarn", "local[1]"):
        cluster = SessionSettings(master="local[2]", conf={"spark.master": master}) if master == "yarn" \
            else SessionSettings(master=master)
        _prepare_environment(cluster, str(tmp_path))
        conf = _builder_conf(cluster, str(tmp_path))
        if master.startswith("local"):
            assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
            assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1")
        else:
            assert "SPARK_LOCAL_IP" not in os.environ
            assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf


def test_a_java_error_is_named_by_its_cause() -> None:
    """A Py4JJavaError's own text only names the JVM call; the line is its innermost cause's message."""
    from klog.spark.failures import from_spark

    class Java:
        def __init__(self, message: str | None, cause: Java | None = None) -> None:
            self.message, self.cause = message, cause

        def getMessage(self) -> str | None:  # noqa: N802 - Java's name
            return self.message

        def getCause(self) -> Java | None:  # noqa: N802
            return self.cause

    class Py4JJavaError(Exception):
        def __init__(self, java: Java) -> None:
            super().__init__("An error occurred while calling o102.getResult.")
            self.java_exception = java

    assert_true = Java("Exception thrown in awaitResult: ", Java(
        "[USER_RAISED_EXCEPTION] '(1 < 0)' is not true! SQLSTATE: P0001"))
    assert str(from_spark(Py4JJavaError(assert_true))) == "Spark: '(1 < 0)' is not true!"
    no_python = Java("Job aborted due to stage failure: Task 0 failed 1 times, most recent failure: Lost task 0.0 "
                     "(TID 0) (localhost executor driver): java.io.IOException: Cannot run program \"/x/python\": "
                     "error=2, No such file or directory\n\tat java.base/java.lang.ProcessBuilder.start",
                     Java('Cannot run program "/x/python": error=2, No such file or directory',
                          Java("error=2, No such file or directory")))
    assert str(from_spark(Py4JJavaError(no_python))) == ('Spark: Cannot run program "/x/python": error=2, No such '
                                                         "file or directory")


def test_session_settings_and_a_users_conf(spark, tmp_path) -> None:
    """klog's session: UI off, a local driver on loopback, Spark's logs at WARN (INFO with --verbose, with
    stack traces); --conf adds to that, and a user's extraJavaOptions keep klog's log settings."""
    from klog.cli.spark import _settings
    from klog.spark.jar import JAR_PATH
    from klog.spark.session import _builder_conf

    # the running (shared) session was built this way
    assert spark.sparkContext.uiWebUrl is None and spark.conf.get("spark.ui.enabled") == "false"
    assert spark.conf.get("spark.driver.host") == "127.0.0.1"
    assert str(spark._jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel()) == "WARN"

    def log4j_of(conf: dict) -> str:
        option = next(o for o in conf["spark.driver.extraJavaOptions"].split()
                      if o.startswith("-Dlog4j2.configurationFile=file:"))
        with open(option.split("file:", 1)[1]) as f:
            return f.read()

    for verbose, level in ((False, "warn"), (True, "info")):
        settings = _settings("local[2]", ["spark.driver.extraJavaOptions=-Duser.flag=a=b -Xss4m",
                                          "spark.sql.shuffle.partitions=3", "spark.executor.memory=2g",
                                          "spark.jars=/opt/theirs.jar"],
                             verbose, str(tmp_path / "data"))
        work = tmp_path / str(verbose)
        work.mkdir()
        conf = _builder_conf(settings, str(work), "-XX:SharedArchiveFile=/tmp/x.jsa")
        assert conf["spark.ui.enabled"] == "false" and conf["spark.master"] == "local[2]"
        assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1")
        assert (conf["spark.sql.shuffle.partitions"], conf["spark.executor.memory"]) == ("3", "2g")  # user's win
        assert conf["spark.jars"] == f"/opt/theirs.jar,{JAR_PATH}"  # klog's jar (Update mode) beside the user's
        java = conf["spark.driver.extraJavaOptions"].split()
        assert java[:2] == ["-Duser.flag=a=b", "-Xss4m"] and "-XX:SharedArchiveFile=/tmp/x.jsa" in java
        properties = log4j_of(conf)
        assert f"rootLogger.level = {level}\n" in properties
        assert f"logger.gateway.level = {level}\n" in properties
        assert ("alwaysWriteExceptions = false" in properties) is not verbose  # --verbose shows stack traces


def test_export_since_starts_at_a_time(cli, orders, tmp_path) -> None:
    out = str(tmp_path / "since")
    since = dt.datetime.fromtimestamp((T0 + 3_600_000 * 20) / 1000, dt.UTC).isoformat()
    result = cli("spark", "export", "orders", "--out", out, "--since", since)
    assert result.exit_code == 0, result.stderr
    assert read_back(out, "parquet") == expected(orders, keep=lambda r: r.timestamp >= T0 + 3_600_000 * 20)
    assert f"exported 30 records to {out}" in result.stderr


def test_export_binary_values_round_trip_to_parquet(cli, store, spark, tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.dataset as ds

    store.create_topic("blobs", partitions=2)
    with store.producer() as producer:
        for i in range(12):
            producer.send("blobs", bytes([i, 255 - i, 0, 0x80 + i]) * (i + 1), partition=i % 2,
                          key=None if i % 4 == 0 else b"\xff\xfe" + bytes([i]), headers=[("h", b"\x80\x00")])
    out = str(tmp_path / "blobs")
    result = cli("spark", "export", "blobs", "--out", out, "--value-format", "binary")
    assert result.exit_code == 0, result.stderr
    table = ds.dataset(out, format="parquet").to_table()
    assert table.schema.field("key").type == pa.binary() and table.schema.field("value").type == pa.binary()
    got = sorted((r["partition"], r["offset"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]])
                 for r in table.to_pylist())
    assert got == sorted((r.partition, r.offset, r.key, r.value, [(k, v) for k, v in r.headers])
                         for r in store.consumer("blobs", merge=False))
    assert len(got) == 12


def test_sql_out_json_files_read_back(cli, orders, tmp_path) -> None:
    out = str(tmp_path / "sql-json")
    result = cli("spark", "sql", "SELECT _partition AS p, _offset AS o, id, name FROM orders WHERE amount >= 30",
                 "--out", out, "--to", "json")
    assert result.exit_code == 0, result.stderr
    got = sorted((r["p"], r["o"], r["id"], r["name"]) for path in glob.glob(os.path.join(out, "part-*"))
                 for r in map(json.loads, open(path)))
    want = sorted((r.partition, r.offset, v["id"], v["name"]) for r in orders.consumer("orders", merge=False)
                  if (v := json.loads(r.value))["amount"] >= 30)
    assert got == want and len(want) == 30
    assert f"wrote 30 rows to {out}: " in result.stderr


def test_sql_result_as_a_table_on_a_terminal(spark, orders, data_dir, monkeypatch, capsys) -> None:
    import io
    import re

    from klog.cli import spark as spark_cli
    from klog.spark import sql as spark_sql

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    df = spark_sql.query(spark, data_dir, "SELECT _offset AS o, name, CAST(NULL AS STRING) AS nothing, "
                         "named_struct('id', id) AS s FROM orders WHERE _partition = 0 AND _offset < 3 ORDER BY o")
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setattr(spark_cli, "TABLE_ROWS_MAX", 2)
    spark_cli._print_rows(*spark_sql.rows(df))
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in terminal.getvalue().splitlines()]
    assert [re.split(r"\s{2,}", line.strip()) for line in lines] == [
        ["o", "name", "nothing", "s"], ["0", "n0", '{"id": 0}'], ["1", "n1", '{"id": 1}']]
    assert capsys.readouterr().err == "(showing the first 2 rows; pipe the output for all of them)\n"


def test_stream_runs_micro_batches_until_ctrl_c(cli, store, spark, data_dir) -> None:
    """Without --available-now the job keeps taking new records until SIGINT; it then stops cleanly and
    reports what it streamed. The interrupting thread waits for the job's own SIGINT handler."""
    import signal
    import threading
    import time

    import klog

    def produce(s, start: int, stop: int) -> None:
        with s.producer() as producer:
            for i in range(start, stop):
                producer.send("ticks", f"t{i}".encode(), key=f"k{i % 2}".encode())

    def target_count(s) -> int:
        return sum(1 for _ in s.consumer("ticks-up")) if s.has_topic("ticks-up") else 0

    store.create_topic("ticks", partitions=2)
    produce(store, 0, 10)
    original = signal.getsignal(signal.SIGINT)
    done = threading.Event()
    seen: list[int] = []

    def driver() -> None:
        deadline = time.monotonic() + 120  # a guard against a hang, not a timing check
        with klog.open(data_dir) as s:
            def wait_for(n: int) -> bool:
                while not done.is_set() and time.monotonic() < deadline:
                    if signal.getsignal(signal.SIGINT) is not original and target_count(s) >= n:
                        return True
                    time.sleep(0.1)
                return False

            if not wait_for(10):
                return
            seen.append(target_count(s))
            produce(s, 10, 25)  # arrives while the job runs: a later micro-batch takes it
            if wait_for(25):
                seen.append(target_count(s))
                os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=driver, daemon=True)
    thread.start()
    try:
        result = cli("spark", "stream", "--from", "ticks", "--to", "ticks-up", "--trigger-seconds", "0.2",
                     "--sql", "SELECT key, upper(value) AS value FROM source")
    finally:
        done.set()
        thread.join()
    assert seen == [10, 25]
    assert result.exit_code == 130, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("streaming ticks -> ticks-up (checkpoint ") and lines[0].endswith("Ctrl-C stops")
    assert lines[1].startswith("streamed 25 records in ") and lines[2] == "klog: interrupted"
    assert sorted(r.value for r in store.consumer("ticks-up")) == sorted(f"T{i}".encode() for i in range(25))


def test_sql_to_topic_keeps_a_column_name_with_a_backtick(cli, store, spark) -> None:
    with store.producer() as producer:
        producer.send("ticks", json.dumps({"a`b": 1, "plain": 2}).encode())
    result = cli("spark", "sql", "SELECT `a``b`, plain FROM ticks", "--to-topic", "copied")
    assert result.exit_code == 0, result.stderr
    assert [json.loads(r.value) for r in store.consumer("copied")] == [{"a`b": 1, "plain": 2}]


def test_scratch_directory_on_a_filesystem_without_locks(tmp_path, monkeypatch) -> None:
    """$TMPDIR where flock fails (some network filesystems): Spark still gets its scratch directory, one
    that no later command's sweep takes for a dead klog's (it has no lock file)."""
    import errno
    import fcntl
    import tempfile

    from klog.spark import session

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(fcntl, "flock", no_locks)
    path = session._work_dir()
    assert os.path.dirname(path) == str(tmp_path) and session.OWNER_LOCK not in os.listdir(path)
    session._sweep_work_dirs(str(tmp_path))
    assert os.path.isdir(path)


def test_a_stopped_command_hides_the_accumulator_servers_tracebacks(spark, capfd, monkeypatch) -> None:
    """Once the user stopped a command (mute_jvm), a connection the stopping JVM breaks is not a
    traceback on stderr from PySpark's accumulator server (the signal test saw one once in 4 runs)."""
    from klog.spark import session

    server = spark.sparkContext._accumulatorServer
    monkeypatch.setattr(session, "_pump", type("Pump", (), {"mute": lambda self: None})())
    monkeypatch.setattr(server, "handle_error", server.handle_error)  # restored after the test
    session.mute_jvm()
    capfd.readouterr()
    try:
        raise ConnectionResetError("reset by the JVM")
    except ConnectionResetError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert capfd.readouterr().err == ""
