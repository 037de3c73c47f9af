"""The signal channel's reachability check works in a process holding many descriptors.

Goal: a Connect worker with more than 1,024 open descriptors (many files, many connections) still sees
its signal cluster answer: select() refuses such descriptors (ValueError at every check: the channel never
connected). Method: hold 1,100 descriptors, then check a listening 127.0.0.1 socket and a closed port.
"""

from __future__ import annotations

import os
import resource
import socket

import pytest

from klog.connect.signals import Reach


def test_a_check_with_descriptors_past_1024(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the descriptor limit ({hard}) is below what the test holds")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(8)
            port = server.getsockname()[1]
            assert Reach(f"127.0.0.1:{port}").check(2.0) is None
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        free_port = closed.getsockname()[1]
        closed.close()
        said = Reach(f"127.0.0.1:{free_port}").check(2.0)
        assert said is not None and "refused" in said
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
