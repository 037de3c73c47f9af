"""The sample scripts a user copies from run as shipped: exit 0 against a fresh data directory, with
`python -m klog` standing in for an installed `klog` (each takes a few seconds)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(REPO, "samples")

# script -> (tools it needs besides bash and klog, a line its output must have)
SCRIPTS = {
    "pipeline-grep-jq.sh": (("grep", "wc", "sort", "uniq", "diff", "jq"),
                            "round trip: 2000 -> 2000 records, identical"),
    "keyed-partitions.sh": (("awk", "sort", "uniq", "wc"), "each key stays in one partition"),
    "follow.sh": (("sleep",), "follower stopped after 3 records"),
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_sample_script_runs(script, tmp_path):
    tools, expected = SCRIPTS[script]
    missing = [t for t in ("bash", *tools) if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{script} needs {', '.join(missing)}")
    env = {**os.environ, "KLOG": f"{sys.executable} -m klog", "KLOG_DATA_DIR": str(tmp_path / "data"),
           "PYTHONPATH": REPO}
    # output to files, not pipes: a background helper a script leaves behind (follow.sh's watchdog
    # `sleep 30`) would hold a pipe open long after the script exited
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(["bash", os.path.join(SAMPLES, script)], stdout=out, stderr=err, env=env,
                                cwd=str(tmp_path), start_new_session=True)
        try:
            code = proc.wait(timeout=120)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # the script's own process group: its leftovers
            except ProcessLookupError:
                pass
    stdout, stderr = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    assert code == 0, f"{script} exited {code}:\n{stdout}\n{stderr}"
    assert expected in stdout, stdout
    assert "Traceback" not in stderr, stderr
