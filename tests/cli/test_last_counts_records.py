"""`klog consume TOPIC --last N` prints the N newest *records* of the topic: offsets that hold no
record (here, offsets Kafka's cleaner removed with their batches) never make it print fewer."""

from __future__ import annotations

import time

from tests.kafka_files import v2_batch, write_segment

T0 = int(time.time() * 1000) - 60_000


def test_a_window_wholly_inside_a_kafka_compaction_gap_reads_on(cli, tmp_path):
    """Kafka's cleaner drops the batches it emptied: offsets 10..29 hold no batch at all. Reading back
    from the end, a window that lies wholly in that gap holds nothing (it is no damage: `--last 4`
    said "offsets from 20 are missing"), and the records before it are found."""
    folder = str(tmp_path / "k" / "gap-0")
    write_segment(folder, 0, [v2_batch(i, [(b"k%d" % i, b"v%d" % i, T0 + i)]) for i in range(10)]
                  + [v2_batch(30, [(b"a", b"v30", T0 + 30)])])
    write_segment(folder, 31, [v2_batch(31, [(b"b", b"v31", T0 + 31)])])
    assert cli("dirs", "import", folder).exit_code == 0
    for args in ([], ["-X", "isolation.level=read_committed"]):  # windows 28..31, 20..27 (the gap), 4..19
        r = cli("consume", "gap", "--last", "4", *args)
        assert (r.exit_code, r.out.splitlines()) == (0, ["v8", "v9", "v30", "v31"]), r.stderr
    assert cli("consume", "gap", "--last", "20").out.splitlines() == [f"v{i}" for i in (*range(10), 30, 31)]
