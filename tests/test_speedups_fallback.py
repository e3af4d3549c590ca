"""Without minibroker._speedups (no C compiler, e.g. a slim image), the package
falls back to its Python twins and aiokafka's builder, with the same results."""
import subprocess
import sys

SCRIPT = r"""
import sys
sys.modules["minibroker._speedups"] = None           # as if the extension was never built
from aiokafka.record._crecords import DefaultRecordBatchBuilder
from minibroker import clock, records
from minibroker.client.partitioner import murmur2, murmur2_py
from minibroker.client.producer import RecordFuture
assert murmur2 is murmur2_py and murmur2(b"foobar") == -790332482
assert clock.WallClock.now_ms is clock.wall_ms_py
assert not hasattr(records, "RecordsBuilder")
b = records.new_builder()
assert isinstance(b, DefaultRecordBatchBuilder)
b.append(0, 5, b"k", b"v", [("h", b"1")])
(rec,) = records.iter_records(bytes(b.build()))
assert (rec.key, rec.value, rec.timestamp) == (b"k", b"v", 5)
from minibroker.client import producer
from minibroker.client.types import RecordMetadata
assert producer._metadata is RecordMetadata
f = RecordFuture("batch", 3)
assert (f._batch, f._index) == ("batch", 3)
from minibroker.net import connection
assert connection.decode_map(b"\x80") is None
from minibroker.protocol import framing
assert framing.msgpack_objects is framing.msgpack_objects_py
assert framing.response_entries is framing._response_entries
assert framing.response_entries({"topics": [{"partitions": [1, 2]}]}, 10) == 3
assert framing.decodes_inline(b"\x92" + b"\xc4\xff" + b"x" * 255 + b"\xc6\x00\x02\x00\x00" + b"y" * 131072)
print("ok")
"""


def test_the_package_works_without_its_c_speedups():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
