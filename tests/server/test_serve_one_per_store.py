"""One `klog serve` per store: a second server on the same store is refused at start with the first
one's pid and listeners (two would each coordinate their own consumer groups: one group split in two,
every record processed twice); a server killed with -9 leaves nothing that blocks the next start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import klog
from klog.errors import KlogError
from klog.server.server import Server
from tests.conftest import REPO


def _serve_cli(data_dir: str) -> subprocess.Popen:
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    return subprocess.Popen([sys.executable, "-m", "klog", "serve", "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True, env=env)


def test_a_second_server_on_the_store_is_refused_until_the_first_stops(data_dir):
    with klog.open(data_dir) as store:
        store.create_topic("t")
    with Server(data_dir, listen=("127.0.0.1", 0)) as first:
        with pytest.raises(KlogError, match=rf"another klog serve already serves the store .*pid {os.getpid()}, "
                                            rf"listening on 127\.0\.0\.1:{first.port}"):
            with Server(data_dir, listen=("127.0.0.1", 0)):
                pass
        proc = _serve_cli(data_dir)  # the command line: one line, exit 1, no traceback
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 1
        assert err.strip().splitlines() == [err.strip()], err
        assert "another klog serve already serves the store" in err and "Traceback" not in err
        with klog.open(data_dir) as store:  # local commands still share the store with the server
            store.producer().send("t", b"v")
    with Server(data_dir, listen=("127.0.0.1", 0)) as again:  # the first one stopped: the store is free
        assert again.port


@pytest.mark.slow
def test_a_killed_server_does_not_block_the_next_start(data_dir):
    proc = _serve_cli(data_dir)
    try:
        line = proc.stderr.readline()
        assert line.startswith("klog serve: listening"), line
        with pytest.raises(KlogError, match=rf"pid {proc.pid}, listening on 127\.0\.0\.1:\d+"):
            with Server(data_dir, listen=("127.0.0.1", 0)):
                pass
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
        proc.wait(10)
    with Server(data_dir, listen=("127.0.0.1", 0)) as after:
        assert after.port
