"""The LMDB data file's own check, before LMDB maps it: a file cut short (a copy that stopped
early) is read past its end by LMDB, which is SIGBUS, not an error. Its own module, light to import:
shell completion (klog.cli.complete) asks it at every Tab, before reading names from the file.

The layout read here is LMDB's (lmdb.h, mdb.c): two meta pages at the start of data.mdb, each a
page header then MDB_meta.
"""

from __future__ import annotations

import os
import struct

_META = struct.Struct("<I20xI92xQQ")  # mm_magic, the free DB's md_pad (the page size), mm_last_pg, mm_txnid
_META_AT = 16  # after the page header
_LMDB_MAGIC = 0xBEEFC0DE


def cut_short(data_file: str) -> str | None:
    """Why `data_file` holds fewer pages than its newest meta page says it has, or None (also when
    it is no LMDB file at all: LMDB's own open then says so in one line)."""
    try:
        with open(data_file, "rb") as f:
            head = f.read(_META_AT + _META.size)
            if len(head) < _META_AT + _META.size:
                return None
            magic, page_size, _, _ = _META.unpack_from(head, _META_AT)
            if magic != _LMDB_MAGIC or page_size < 512 or page_size & (page_size - 1):
                return None
            size = os.fstat(f.fileno()).st_size
            if size < 2 * page_size:
                return f"{size} bytes, less than its two meta pages"
            f.seek(page_size)
            second = f.read(_META_AT + _META.size)
    except OSError:
        return None
    metas = [_META.unpack_from(page, _META_AT) for page in (head, second)]
    newest = max((m for m in metas if m[0] == _LMDB_MAGIC), key=lambda m: m[3])
    needed = (newest[2] + 1) * page_size
    return f"{size} bytes of the {needed} it holds" if size < needed else None
