from __future__ import annotations

import pytest

from minibroker.errors import ErrorCode, KafkaError
from minibroker.storage import LogConfig


def test_defaults_match_kafka():
    c = LogConfig()
    assert (c.segment_bytes, c.segment_ms, c.index_interval_bytes) == (1 << 30, 604800000, 4096)
    assert (c.retention_bytes, c.retention_ms, c.max_message_bytes) == (-1, 604800000, 1048588)
    assert c.flush_messages == 2**63 - 1 and c.flush_ms == 2**63 - 1 and not c.flush_on_acks_all
    assert c.file_delete_delay_ms == 60000
    assert LogConfig.from_properties({"log.segment.delete.delay.ms": "0"}).file_delete_delay_ms == 0


def test_topic_and_broker_property_names_map_to_fields():
    c = LogConfig.from_properties({"segment.bytes": "1048576", "log.retention.ms": 1000,
                                   "log.flush.interval.messages": "1", "minibroker.flush.on.acks.all": "true"})
    assert (c.segment_bytes, c.retention_ms, c.flush_messages, c.flush_on_acks_all) == (1048576, 1000, 1, True)
    assert LogConfig.from_properties({"retention.bytes": "5"}, base=c).segment_bytes == 1048576
    assert LogConfig.from_properties(c.to_properties()) == c


@pytest.mark.parametrize("props", [{"segment.bytes": "abc"}, {"no.such": "1"}, {"segment.bytes": "10"},
                                   {"retention.ms": "-2"}, {"minibroker.flush.on.acks.all": "yes"},
                                   {"flush.messages": "0"}, {"segment.bytes": True},
                                   {"file.delete.delay.ms": "-1"}])
def test_bad_values_are_invalid_config(props):
    with pytest.raises(KafkaError) as ei:
        LogConfig.from_properties(props)
    assert ei.value.code == ErrorCode.INVALID_CONFIG
