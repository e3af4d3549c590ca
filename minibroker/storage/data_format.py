"""The record format a data directory holds, marked by a file in it.

Owns `record-format` in each log dir: one line, `kafka-v2`, written (and
fsynced) when a broker first uses the directory. minibroker 0.1 wrote
batches with the same 61-byte header but a msgpack records section, and no
marker; a Kafka client cannot read those, and minibroker's own reader no
longer does. So at startup (`ensure_record_format`) a directory is:

* marked: its marker says `kafka-v2` -> used as is;
* unmarked and holding no record batch (new, or only empty partitions and
  checkpoints) -> marked, then used;
* unmarked and holding batches -> refused with DataDirFormatError, whose
  message names the directory, what is in it and the two ways out: convert
  it offline with `minibroker storage migrate --log-dir DIR`
  (minibroker.storage.migrate: every batch's records rewritten in Kafka's
  encoding, offsets, epochs and timestamps kept), or delete it (the broker
  re-replicates from the other replicas, or starts empty).

Must not know about brokers or the network. Blocking file calls: run it off
the event loop.
"""
from __future__ import annotations

import os

from minibroker.storage import fsutil

FORMAT_FILE = "record-format"
FORMAT = "kafka-v2"
_SEGMENT_SUFFIX = ".log"


class DataDirFormatError(Exception):
    """A data directory this version cannot use; the message says what to do."""


def read_marker(data_dir: str) -> str | None:
    try:
        with open(os.path.join(data_dir, FORMAT_FILE), encoding="utf-8") as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def write_marker(data_dir: str) -> None:
    """Write the marker atomically (temp file, fsync, rename, fsync the dir)."""
    path = os.path.join(data_dir, FORMAT_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(FORMAT + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsutil.fsync_dir(data_dir)


def segments_with_data(data_dir: str) -> list[str]:
    """Every non-empty segment file under the partition directories of `data_dir`."""
    out = []
    for name in sorted(os.listdir(data_dir)):
        part = os.path.join(data_dir, name)
        if not os.path.isdir(part):
            continue
        for seg in sorted(os.listdir(part)):
            path = os.path.join(part, seg)
            if seg.endswith(_SEGMENT_SUFFIX) and os.path.getsize(path) > 0:
                out.append(path)
    return out


def ensure_record_format(data_dir: str) -> None:
    """Called once per log dir at broker start, before any log is opened.
    Marks a directory without data; raises DataDirFormatError for one whose
    batches are in another format (see the module comment)."""
    os.makedirs(data_dir, exist_ok=True)
    marker = read_marker(data_dir)
    if marker == FORMAT:
        return
    if marker is not None:
        raise DataDirFormatError(
            f"data dir {data_dir} holds records in format {marker!r} ({FORMAT_FILE}); this minibroker "
            f"reads only {FORMAT!r}. Use the minibroker version that wrote it, or delete the directory.")
    data = segments_with_data(data_dir)
    if data:
        raise DataDirFormatError(
            f"data dir {data_dir} holds minibroker 0.1 batches (msgpack records, no {FORMAT_FILE} file; "
            f"{len(data)} non-empty segment(s), e.g. {os.path.relpath(data[0], data_dir)}). This version "
            f"stores Kafka's record format. Either convert it in place while the broker is stopped: "
            f"minibroker storage migrate --log-dir {data_dir} ; or delete the directory (the broker then "
            f"starts empty and re-replicates from the other replicas).")
    write_marker(data_dir)
