"""`klog spark run SCRIPT.py [ARGS]`: a user's PySpark script in a session set up for the store.

What spark-submit would do, in this process: the script's SparkSession.builder.getOrCreate()
returns the session klog started (master, conf, loopback, quiet logs), the `klog` source is
registered, KLOG_DATA_DIR names the store, and the script also finds `spark` as a global.
"""

from __future__ import annotations

import os
import runpy
import sys

from klog.errors import UsageError


def check_script(script: str) -> None:
    if not os.path.isfile(script):
        raise UsageError(f"no such script: {script}")


def run_script(spark, script: str, args: list[str]) -> int:  # noqa: ANN001 - SparkSession
    """Run the script as __main__ with sys.argv = [script, *args]; returns its exit code."""
    check_script(script)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python script.py` would
    try:
        runpy.run_path(script, init_globals={"spark": spark}, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        print(e.code, file=sys.stderr)
        return 1
    except Exception as e:
        from klog.errors import KlogError
        from klog.spark.failures import is_spark_error

        if isinstance(e, KlogError) or is_spark_error(e):
            raise  # a Spark or klog error: klog's one line (spark_errors), as for the other commands
        _print_script_traceback(e, script)  # the script's own error, as `python SCRIPT` reports it
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


def _print_script_traceback(exc: BaseException, script: str) -> None:
    """Python's traceback of an exception the script raised, from the script's first frame on
    (klog's and runpy's frames above it are not the user's concern), exit code 1 as Python's."""
    import traceback

    tb = exc.__traceback__
    path = os.path.abspath(script)
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != path:
        tb = tb.tb_next
    sys.stderr.writelines(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    sys.stderr.flush()


def script_error(exc: BaseException, script: str):  # noqa: ANN201 - KlogError
    """A --script's own error (its syntax, its transform raising) as one line naming the script, the
    line of it that failed and the error: `--script t.py, line 2: ValueError: bad row`."""
    import traceback

    from klog.errors import KlogError

    path, line = os.path.abspath(script), None
    if isinstance(exc, SyntaxError) and exc.filename and os.path.abspath(exc.filename) == path:
        line, text = exc.lineno, exc.msg
    else:
        for frame in traceback.extract_tb(exc.__traceback__):
            if os.path.abspath(frame.filename) == path:
                line = frame.lineno  # the script's last frame: where its own code failed
        text = str(exc)
    where = f"--script {script}" + (f", line {line}" if line is not None else "")
    return KlogError(f"{where}: {type(exc).__name__}" + (f": {text}" if text else ""))
