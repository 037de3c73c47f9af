"""The one line a Python worker's failure becomes names the user's frame, wherever the user keeps it.

Goal: `klog spark run` says `a Python worker failed: ERROR (FILE, line N)` with the last frame of the
user's code; klog's, PySpark's and py4j's frames are not the user's. Method: the traceback text a
worker sends, with a user script kept in a folder named klog (as ~/klog/job.py), through
klog.spark.failures._worker_error (no JVM).
"""

from __future__ import annotations

import os

import klog
from klog.spark.failures import _worker_error

KLOG_FILE = os.path.join(os.path.dirname(klog.__file__), "spark", "sink.py")


def _traceback(user_path: str) -> str:
    return ("Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/site-packages/pyspark/worker.py", line 1, in main\n'
            f'  File "{user_path}", line 7, in divide\n'
            f'  File "{KLOG_FILE}", line 3, in wrapper\n'
            "ZeroDivisionError: division by zero\n")


def test_a_script_in_a_folder_named_klog_is_the_users(tmp_path):
    script = str(tmp_path / "klog" / "job.py")
    said = _worker_error(_traceback(script))
    assert said == f"a Python worker failed: ZeroDivisionError: division by zero ({script}, line 7)"


def test_klogs_own_frames_are_not_named():
    assert _worker_error(_traceback(KLOG_FILE)) == "a Python worker failed: ZeroDivisionError: division by zero"
