"""The local SparkSession every `klog spark` command runs in, with the klog source registered.

Local by default: `local[*]`, driver bound to loopback (local masters only), UI off, Spark's logs
at WARN (INFO with verbose) without JVM stack traces; `master` and `conf` make the same job run on
a cluster. A master Spark would reject, or a JVM that cannot start, is one line (launch.py). Must
run before the JVM starts: it sets the environment Spark's Python workers inherit (the
interpreter, klog on PYTHONPATH, KLOG_DATA_DIR).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from klog.spark.java import find_java, require_pyspark
from klog.spark.launch import check_master, gateway_exited, is_local, jvm_stderr, launch_error, start_gateway

KLOG_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHUFFLE_PARTITIONS = 8  # Spark's 200 makes every small local aggregation schedule 200 tasks
_archive = None  # the ClassArchive (classcache.py) of the JVM this process started, if any
_pump = None  # the StderrPump (launch.py) forwarding that JVM's stderr, if quiet


@dataclass
class SessionSettings:
    master: str = "local[*]"
    conf: dict[str, str] = field(default_factory=dict)
    verbose: bool = False
    data_dir: str | None = None
    progress: bool = False  # Spark's console progress bar (export shows it on a terminal)
    app_name: str = "klog"
    class_cache: bool = True  # map (or record, the first time) the JVM class archive: see classcache.py
    notify: Callable[[str], None] | None = None  # for a line the user should see (e.g. a slow first exit)


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    """`--conf k=v` pairs, as spark-submit takes them."""
    from klog.client.pairs import parse_pairs

    return parse_pairs(pairs, "--conf", "KEY=VALUE, e.g. spark.driver.memory=4g", strip_values=False)


def master_of(settings: SessionSettings) -> str:
    """The master the session gets: --conf spark.master wins over --master, as on the builder."""
    return settings.conf.get("spark.master", settings.master)


def _log4j_properties(verbose: bool) -> str:
    level = "info" if verbose else "warn"
    lines = [
        f"rootLogger.level = {level}",
        "rootLogger.appenderRef.stderr.ref = klogstderr",
        "appender.console.type = Console",
        "appender.console.name = klogstderr",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n",
        # Spark's shell start-up applies this logger's level to the console and says so unless it equals
        # the root's: equal levels keep the console at `level` and the "Setting default log level" lines away
        "logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer",
        f"logger.gateway.level = {level}",
        "logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader",
        "logger.hadoop.level = error",
    ]
    if not verbose:
        # a failing task is reported once, by klog, as one line: no JVM stack traces
        lines += ["appender.console.layout.alwaysWriteExceptions = false"]
        for i, name in enumerate(("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                                  "org.apache.spark.sql.execution.datasources.FileFormatWriter",
                                  "org.apache.spark.sql.execution.streaming",
                                  "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
                                  "org.apache.spark.util.Utils",
                                  # registering the source again (a second command in one session) is expected
                                  "org.apache.spark.sql.execution.datasources.DataSourceManager",
                                  # stopping a stream on Ctrl-C cancels job groups that already finished
                                  "org.apache.spark.scheduler.DAGScheduler")):
            lines += [f"logger.quiet{i}.name = {name}", f"logger.quiet{i}.level = off"]
    return "\n".join(lines) + "\n"


def _prepare_environment(settings: SessionSettings, work_dir: str) -> None:
    """What Spark's launcher and its Python workers inherit (spark-notes gotchas 1, 2)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from klog.spark.sink import STAGING_ENV

    os.environ.pop(STAGING_ENV, None)
    if is_local(master_of(settings)):  # on a cluster, executors must reach the driver on a real address
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ["PYSPARK_PYTHON"] = worker_python(work_dir)
        os.environ[STAGING_ENV] = os.path.join(work_dir, "staging")  # goes with the work dir
    path = os.environ.get("PYTHONPATH", "")
    if KLOG_ROOT not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (KLOG_ROOT, path) if p)
    if settings.data_dir:
        os.environ["KLOG_DATA_DIR"] = os.path.abspath(settings.data_dir)
    # Spark's scratch space (gotcha 8); the env, not spark.local.dir, which always logs a warning
    os.environ["SPARK_LOCAL_DIRS"] = work_dir


def _spark_zips() -> tuple[str, ...]:
    """The zips Spark puts first on its Python workers' PYTHONPATH ($SPARK_HOME/python/lib/pyspark.zip
    and py4j's), when the pyspark and py4j this process runs are installed as directories (a pip
    install): then the workers find the same modules without them. Empty otherwise."""
    import py4j
    import pyspark

    if any(".zip" in (m.__file__ or ".zip") for m in (pyspark, py4j)):
        return ()
    from pyspark.find_spark_home import _find_spark_home

    lib = os.path.join(_find_spark_home(), "python", "lib")
    return (os.path.join(lib, "pyspark.zip"), os.path.join(lib, "py4j-*-src.zip"))


def worker_python(work_dir: str) -> str:
    """The interpreter a local master's Python workers run: sys.executable, through a shell wrapper
    in work_dir that takes Spark's zips (_spark_zips) off their PYTHONPATH.

    A zip has no bytecode cache, so a worker importing pyspark from Spark's zip compiles it on every
    start: 3-4x slower (~3 s on a loaded 2-core machine instead of ~0.8). The streaming source's
    worker must connect back to the JVM within a fixed 10 s (PythonWorkerFactory.createSimpleWorker,
    not configurable in Spark 4.3): past it the query fails with "Python worker failed to connect
    back". sys.executable itself where a script cannot run (no zips to drop, a noexec work_dir)."""
    zips = _spark_zips()
    if not zips or os.name != "posix" or os.statvfs(work_dir).f_flag & os.ST_NOEXEC:
        return sys.executable
    import shlex

    patterns = "|".join(shlex.quote(os.path.dirname(z)) + "/" + os.path.basename(z) for z in zips)
    path = os.path.join(work_dir, "python")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                "# klog: Spark's Python worker without Spark's pyspark.zip on PYTHONPATH (klog/spark/session.py)\n"
                "set -f\nkeep=\nIFS=:\n"
                "for p in ${PYTHONPATH-}; do\n"
                f"  case \"$p\" in {patterns}) ;; *) keep=\"${{keep:+$keep:}}$p\" ;; esac\n"
                "done\nunset IFS\n"
                "if [ -n \"$keep\" ]; then PYTHONPATH=$keep; export PYTHONPATH; else unset PYTHONPATH; fi\n"
                f"exec {shlex.quote(sys.executable)} \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def _builder_conf(settings: SessionSettings, work_dir: str, jvm_options: str = "") -> dict[str, str]:
    log4j = os.path.join(work_dir, "log4j2.properties")
    with open(log4j, "w") as f:
        f.write(_log4j_properties(settings.verbose))
    conf = {
        "spark.master": settings.master,
        "spark.app.name": settings.app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if settings.progress else "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j} {jvm_options}".strip(),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
    }
    if is_local(master_of(settings)):  # a local driver listens on loopback only
        conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    user = dict(settings.conf)
    if "spark.driver.extraJavaOptions" in user:  # keep klog's log settings beside the user's JVM options
        user["spark.driver.extraJavaOptions"] += " " + conf["spark.driver.extraJavaOptions"]
    conf.update(user)
    from klog.spark.jar import with_jar

    return with_jar(conf)  # format("klog") takes Update mode (klog/spark/jars/DefaultSource.java)


WORK_DIR_PREFIX = "klog-spark-"
OWNER_LOCK = ".klog-owner"  # in each work dir: locked (flock) while the klog that made it runs
_owned: list[int] = []  # the lock file descriptors of this process's work dirs, open until it exits


def _work_dir() -> str:
    """A klog-owned scratch directory for Spark (SPARK_LOCAL_DIRS), removed when the process exits.

    A klog killed with -9 cannot remove its own: each holds a lock in its directory for as long as it
    runs, and a new one first removes the directories of the same user whose lock is free."""
    _sweep_work_dirs(tempfile.gettempdir())
    path = tempfile.mkdtemp(prefix=WORK_DIR_PREFIX)
    atexit.register(shutil.rmtree, path, True)
    _own(path)
    return path


def _own(path: str) -> None:
    """Lock OWNER_LOCK in `path` for the life of this process (locked before it has its name, so no
    sweep can find it free)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, no sweep
        return
    tmp = os.path.join(path, OWNER_LOCK + ".new")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # a filesystem without locks: no lock file, so no sweep ever removes this dir early
        os.close(fd)
        return
    os.rename(tmp, os.path.join(path, OWNER_LOCK))
    _owned.append(fd)


def _sweep_work_dirs(parent: str) -> None:
    """Remove the work dirs in `parent` whose owner is gone (its OWNER_LOCK can be locked). A directory
    without the lock file (being made, or an older klog's) is left alone."""
    try:
        import fcntl

        names = [n for n in os.listdir(parent) if n.startswith(WORK_DIR_PREFIX)]
    except (ImportError, OSError):
        return
    for name in names:
        try:
            fd = os.open(os.path.join(parent, name, OWNER_LOCK), os.O_RDWR)
        except OSError:  # no lock file, or another user's
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its klog runs
        else:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        finally:
            os.close(fd)


def _get_or_create(builder, quiet: bool, conf: dict[str, str], work_dir: str):  # noqa: ANN001, ANN202
    """builder.getOrCreate() with the JVM's stderr filtered (quiet); a JVM that cannot start is one line.

    The JVM is started first by start_gateway (launch.py): in its own process group, ended with klog."""
    with jvm_stderr(quiet) as pump:
        try:
            start_gateway(conf, work_dir)
            spark = builder.getOrCreate()
        except Exception as e:
            failure: Exception | None = e
        else:
            failure = None
            if pump is not None:
                pump.release()
                global _pump
                _pump = pump
    if failure is None:
        return spark
    exited = gateway_exited(failure)
    text = pump.drop(wait_for_eof=exited) if pump is not None else None  # after fd 2 is ours again
    if exited:
        raise launch_error(text) from None
    raise failure


def _quiet_python_loggers(verbose: bool) -> None:
    """PySpark logs every failed query's context with a JVM stack trace at ERROR; klog reports the error."""
    import logging

    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # through PySparkLogger: a plain logging.Logger of that name would reject PySpark's extra arguments
        PySparkLogger.getLogger(name).setLevel(logging.NOTSET if verbose else logging.CRITICAL)
    # py4j logs a Ctrl-C or SIGTERM during a JVM call (and a call to a JVM that ended) with a traceback,
    # through the root logger: klog says "interrupted" or "terminated" in one line instead
    logging.getLogger("py4j").setLevel(logging.NOTSET if verbose else logging.CRITICAL)
    root = logging.getLogger()
    if verbose:
        root.removeFilter(_py4j_records)
    elif _py4j_records not in root.filters:
        root.addFilter(_py4j_records)


def _py4j_records(record) -> bool:  # noqa: ANN001 - logging.LogRecord
    """A root-logger filter: False for the records py4j's own code logs."""
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def active_session():  # noqa: ANN201 - SparkSession | None
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is None:
        return None
    return SparkSession.builder.getOrCreate()


def start_session(settings: SessionSettings):  # noqa: ANN201 - SparkSession
    """A new session (or the running one, e.g. in tests or inside `klog spark run`) with klog registered."""
    require_pyspark()
    existing = active_session() if sys.modules.get("pyspark") is not None else None
    if existing is not None:
        _quiet_python_loggers(settings.verbose)
        register(existing, settings.data_dir)
        return existing
    global _archive
    check_master(master_of(settings))
    java = find_java()
    work_dir = _work_dir()
    _prepare_environment(settings, work_dir)
    from pyspark.sql import SparkSession

    from klog.spark.classcache import class_archive

    _archive = class_archive(java) if settings.class_cache else None
    if _archive is not None and _archive.dump_to is not None and settings.notify is not None:
        settings.notify(f"klog: recording Spark's JVM classes in {os.path.dirname(_archive.path)} once "
                        "(later starts are faster)")
    builder = SparkSession.builder
    conf = _builder_conf(settings, work_dir, _archive.jvm_options() if _archive else "")
    for key, value in conf.items():
        builder = builder.config(key, value)
    _quiet_python_loggers(settings.verbose)
    spark = _get_or_create(builder, not settings.verbose, conf, work_dir)
    register(spark, settings.data_dir)
    return spark


def register(spark, data_dir: str | None = None) -> None:  # noqa: ANN001 - SparkSession
    """Make format("klog") work in `spark`; with data_dir, reads and writes default to that store."""
    from klog.spark.source import KlogDataSource, bound_source

    spark.dataSource.register(bound_source(os.path.abspath(data_dir)) if data_dir else KlogDataSource)


def stop_session(spark) -> None:  # noqa: ANN001 - SparkSession
    """spark.stop(); when this run's JVM records the class archive, also end the JVM and keep the archive."""
    from pyspark import SparkContext

    spark.stop()
    if _archive is not None and _archive.dump_to is not None and SparkContext._gateway is not None:
        from klog.spark.classcache import finish

        finish(_archive, SparkContext._gateway)
        SparkContext._gateway = None  # the JVM is gone: a later session in this process starts a new one
        SparkContext._jvm = None


def mute_jvm() -> None:
    """Once the user stopped the command: nothing more from the JVM (and its Python workers) on stderr.

    Spark stopping early logs the tasks it kills, and a streaming source's Python runner prints an
    EOFError traceback when its query stops before its first batch; klog reports the stop itself.
    Verbose sessions (no StderrPump) keep everything."""
    if _pump is not None:
        _pump.mute()
        from pyspark import SparkContext

        # PySpark's accumulator server (a socketserver in this process) prints a traceback for a
        # connection the stopping JVM breaks: klog reports the stop itself
        server = getattr(SparkContext._active_spark_context, "_accumulatorServer", None)
        if server is not None:
            server.handle_error = lambda request, client_address: None


@contextmanager
def spark_session(settings: SessionSettings) -> Iterator:
    """start_session(), stopped on exit if this call started it."""
    require_pyspark()
    was_running = sys.modules.get("pyspark") is not None and active_session() is not None
    spark = start_session(settings)
    interrupted = False
    try:
        yield spark
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (klog/cli/session.py)
        interrupted = True
        raise
    except Exception:
        from klog.spark.failures import stop_received

        interrupted = stop_received()  # the error of a JVM call failing as the stop unwinds (stop_wins)
        raise
    finally:
        if not was_running and interrupted:
            # the user stopped the command: not a word from Spark stopping (the tasks it kills log errors),
            # and an error while stopping does not replace the interrupt; the JVM ends with klog regardless
            mute_jvm()
            import warnings

            # nor PySpark's RuntimeWarning "Unable to cleanly shutdown Spark JVM process" when the JVM's
            # connection is already gone
            with contextlib.suppress(Exception), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                stop_session(spark)
        elif not was_running:
            stop_session(spark)
