"""Keys longer than LMDB takes (klog/meta/db.py keeps their first bytes and a hash): a prefix scan
finds exactly the keys under its prefix, however long the prefix."""

from __future__ import annotations

from klog.meta.db import LONG_KEY_KEPT_BYTES, MetaDB


def test_a_prefix_longer_than_shortened_keys_keep_finds_exactly_its_keys(tmp_path):
    """A group id of 4,000 bytes (any client may send one) made the scan of its offsets fail an
    assertion: `klog serve` closed the connection with 'internal error: AssertionError'."""
    db = MetaDB(str(tmp_path / "meta"))
    try:
        group, other = "g" * 4000, "g" * (LONG_KEY_KEPT_BYTES + 10) + "h"
        with db.txn(write=True) as txn:
            for key in (f"{group}\0t\0{0}", f"{group}\0t\0{1}", f"{other}\0t\0{0}", "g\0t\0" + "0", "g" * 450):
                db.put_json(txn, "offsets", key, {"offset": 1})
        with db.txn() as txn:
            assert [k for k, _ in db.items(txn, "offsets", f"{group}\0")] == [f"{group}\0t\0{0}", f"{group}\0t\0{1}"]
            assert {k for k, _ in db.items(txn, "offsets", "g" * 450)} == {"g" * 450, f"{group}\0t\0{0}",
                                                                          f"{group}\0t\0{1}"}
            assert len(list(db.items(txn, "offsets", "g"))) == 5
    finally:
        db.close()
