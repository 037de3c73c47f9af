"""The compiled reader's first import from several threads at once: a distributed Connect worker's sink
tasks (threads of one process) fetched their first big batches together, and _import_reader's stub
packages, put into sys.modules and taken out again by each thread, were deleted twice (KeyError:
'aiokafka', a FAILED task: the flaky three-worker test of tests/connect/test_connect_distributed.py)."""

from __future__ import annotations

import subprocess
import sys

# in a fresh interpreter (aiokafka not imported yet, as in a worker); each stub package is made slowly,
# so the threads' imports overlap as they do when the machine is loaded
RACE = """
import importlib.util, sys, threading, time
from klog.store import fastrecords
assert "aiokafka" not in sys.modules
made = importlib.util.module_from_spec
def slowly(spec):
    time.sleep(0.01)
    return made(spec)
importlib.util.module_from_spec = slowly
errors, start = [], threading.Barrier(6)
def first_read():
    start.wait()
    try:
        assert fastrecords.available()
    except BaseException as e:
        errors.append(repr(e))
threads = [threading.Thread(target=first_read) for _ in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
importlib.util.module_from_spec = made
assert "asyncio" not in sys.modules, "the stubs were bypassed: aiokafka's client loaded"
import aiokafka
from aiokafka.record._crecords import DefaultRecordBatch
assert aiokafka.AIOKafkaConsumer and DefaultRecordBatch is fastrecords._reader
print(errors)
"""


def test_threads_loading_the_reader_at_once_all_get_it() -> None:
    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=60)
    assert done.stdout == "[]\n", done.stdout + done.stderr


AFTER = """
import sys
from klog.client import partitioner
from klog.store import fastrecords
assert partitioner._load_compiled() is not None and fastrecords.available()
assert not [m for m in sys.modules if m.split(".")[0] in ("aiokafka", "confluent_kafka")], "left in sys.modules"
import aiokafka, confluent_kafka
assert confluent_kafka.cimpl.Producer and aiokafka.record._crecords.default_records and aiokafka.errors
print("whole")
"""


def test_a_later_plain_import_of_either_package_is_whole() -> None:
    """klog's bare loads leave nothing behind: a program's own `import confluent_kafka` afterwards
    had no `cimpl` attribute (its module was found in sys.modules, never set on the package)."""
    done = subprocess.run([sys.executable, "-c", AFTER], capture_output=True, text=True, timeout=60)
    assert done.stdout == "whole\n", done.stdout + done.stderr
