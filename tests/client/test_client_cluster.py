"""Producer, consumer and admin against a real cluster that stays healthy (shared per module)."""
import itertools

import pytest

from minibroker.protocol.api import ApiKey
from minibroker.client import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Admin, Consumer, ErrorCode, KafkaError,
                               Producer, TopicPartition)
from minibroker.testing.cluster import wait_for
from minibroker.testing.fixtures import shared_cluster  # noqa: F401

pytestmark = pytest.mark.cluster
_names = itertools.count()


async def new_topic(cluster, partitions=1, assignments=None, configs=None):
    name = f"t{next(_names)}"
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topic(name, partitions if assignments is None else -1,
                                 3 if assignments is None else -1, configs or {"min.insync.replicas": "2"},
                                 assignments=assignments)
    return name


async def read_all(cluster, topic, n, **cfg):
    out = []
    async with Consumer(cluster.bootstrap, {"auto.offset.reset": "earliest", **cfg}) as c:
        await c.assign_topic(topic)
        await wait_for(lambda: _poll_into(c, out, n), timeout_s=30, interval_s=0, what=f"{n} records")
    return out


async def _poll_into(c, out, n):
    out.extend(await c.poll(timeout_ms=200))
    return len(out) >= n


async def test_acks_all_records_get_consecutive_offsets_and_read_back_in_order(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap, {"acks": "all", "linger.ms": 2}) as p:
        futs = [await p.send(topic, b"v%d" % i) for i in range(500)]
        metas = [await f for f in futs]
    assert [m.offset for m in metas] == list(range(500))
    assert {(m.topic, m.partition) for m in metas} == {(topic, 0)}
    recs = await read_all(shared_cluster, topic, 500)
    assert [r.offset for r in recs] == list(range(500))
    assert [r.value for r in recs] == [b"v%d" % i for i in range(500)]


async def test_keys_headers_and_timestamps_survive_the_round_trip(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap) as p:
        md = await p.send_and_wait(topic, b"value", b"key", headers=[("h", b"1")], timestamp_ms=1234)
    assert md.timestamp == 1234
    (rec,) = await read_all(shared_cluster, topic, 1)
    assert (rec.key, rec.value, rec.headers, rec.timestamp) == (b"key", b"value", (("h", b"1"),), 1234)


async def test_keyed_records_spread_by_murmur2_like_kafka(shared_cluster):
    from minibroker.client.partitioner import partition_for_key
    topic = await new_topic(shared_cluster, partitions=3)
    async with Producer(shared_cluster.bootstrap) as p:
        for i in range(30):
            md = await p.send_and_wait(topic, b"x", b"key-%d" % i)
            assert md.partition == partition_for_key(b"key-%d" % i, 3)


async def test_every_kind_of_send_in_one_batch_lands_where_and_as_sent(shared_cluster):
    """send's one-pass case (an open batch takes the record) and its general case
    (headers, timestamps, keys, explicit partitions, a new batch) interleaved on
    the same partitions: each record lands on the partition Kafka's rules pick,
    in send order, with its fields; bad partitions and sizes fail in either case."""
    from minibroker.client.partitioner import partition_for_key
    topic = await new_topic(shared_cluster, partitions=3)
    sent = []
    async with Producer(shared_cluster.bootstrap, {"acks": "all", "linger.ms": 50,
                                                   "max.request.size": 4000}) as p:
        futs = []
        for i in range(300):
            kind = i % 6
            key = b"k%d" % (i % 7) if kind in (1, 2) else None
            headers = [("n", b"%d" % i)] if kind == 2 else None
            ts = 1_000_000 + i if kind == 3 else None
            part = i % 3 if kind == 4 else None
            value = None if kind == 5 else b"v%d" % i
            futs.append(await p.send(topic, value, key, partition=part, headers=headers, timestamp_ms=ts))
            sent.append((key, value, headers, ts, part))
            if i == 150:
                with pytest.raises(KafkaError) as bad:
                    await p.send(topic, b"x", partition=3)
                assert bad.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                with pytest.raises(KafkaError) as big:
                    await p.send(topic, b"x" * 5000)
                assert big.value.code == ErrorCode.MESSAGE_TOO_LARGE
        metas = [await f for f in futs]
    unkeyed_parts = set()
    for (key, _, _, ts, part), md in zip(sent, metas, strict=True):
        if key is not None:
            assert md.partition == partition_for_key(key, 3)
        elif part is not None:
            assert md.partition == part
        else:
            unkeyed_parts.add(md.partition)
        if ts is not None:
            assert md.timestamp == ts
    assert len(unkeyed_parts) == 1          # sticky: no batch filled, so one partition took them all
    recs = await read_all(shared_cluster, topic, 300)
    by_offset = {(r.partition, r.offset): r for r in recs}
    for (key, value, headers, _, _), md in zip(sent, metas, strict=True):
        r = by_offset[(md.partition, md.offset)]
        assert (r.key, r.value, r.headers) == (key, value, tuple(headers or ()))
        assert r.timestamp == md.timestamp
    for part in range(3):
        offsets = [md.offset for md in metas if md.partition == part]
        assert offsets == sorted(offsets) == list(range(len(offsets)))


async def test_acks_one_and_zero_deliver_too(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap, {"acks": "1"}) as p:
        assert (await p.send_and_wait(topic, b"one")).offset == 0
    async with Producer(shared_cluster.bootstrap, {"acks": "0"}) as p:
        md = await p.send_and_wait(topic, b"zero")
        assert md.offset == -1                      # acks=0: no answer, no offset
    recs = await read_all(shared_cluster, topic, 2)
    assert [r.value for r in recs] == [b"one", b"zero"]


async def test_unknown_topic_fails_with_a_clear_error(shared_cluster):
    async with Producer(shared_cluster.bootstrap) as p:
        with pytest.raises(KafkaError) as ei:
            await p.partitions_for("no-such-topic", timeout_ms=1000)
    assert "no-such-topic" in str(ei.value)


async def test_consumer_seek_and_position(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap) as p:
        for i in range(10):
            await p.send(topic, b"%d" % i)
        await p.flush()
    tp = TopicPartition(topic, 0)
    async with Consumer(shared_cluster.bootstrap) as c:
        c.assign([tp])
        assert await c.position(tp) == 10           # auto.offset.reset=latest: the high watermark
        c.seek(tp, 7)
        recs = []
        await wait_for(lambda: _poll_into(c, recs, 3), timeout_s=20, interval_s=0)
        assert [r.value for r in recs] == [b"7", b"8", b"9"]
        assert c.highwater(tp) == 10 and c.caught_up()
        c.seek_to_beginning(tp)
        assert await c.position(tp) == 0


async def test_a_seek_while_a_fetch_is_in_flight_drops_its_answer_and_reads_from_the_new_position(shared_cluster):
    """The Fetch long-polling at offset 10 is answered by record 10 after the seek to 3: that answer
    is stale and must not be handed out (nor move the position past 3..9)."""
    topic = await new_topic(shared_cluster)
    tp = TopicPartition(topic, 0)
    async with Producer(shared_cluster.bootstrap, {"acks": "all"}) as p:
        for i in range(10):
            await p.send(topic, b"%d" % i)
        await p.flush()
        async with Consumer(shared_cluster.bootstrap, {"fetch.max.wait.ms": 20_000}) as c:
            c.assign([tp])
            assert await c.position(tp) == 10
            assert await c.poll(timeout_ms=50) == []
            assert c.state.parts[tp].in_flight              # the long poll at 10 is parked on the leader
            c.seek(tp, 3)
            await p.send_and_wait(topic, b"10")             # wakes it: records from 10
            recs = []
            await wait_for(lambda: _poll_into(c, recs, 8), timeout_s=20, interval_s=0, what="records 3..10")
    assert [r.offset for r in recs] == list(range(3, 11))


async def test_a_poll_that_returns_records_has_already_sent_the_next_fetch(shared_cluster):
    """Kafka's consumer pipelines: the Fetch for a drained partition leaves before poll() returns,
    so it travels while the application handles the records."""
    topic = await new_topic(shared_cluster)
    tp = TopicPartition(topic, 0)
    async with Producer(shared_cluster.bootstrap, {"acks": "all"}) as p:
        await p.send_and_wait(topic, b"first")
        async with Consumer(shared_cluster.bootstrap, {"auto.offset.reset": "earliest",
                                                       "fetch.max.wait.ms": 20_000}) as c:
            c.assign([tp])
            recs = []
            await wait_for(lambda: _poll_into(c, recs, 1), timeout_s=20, interval_s=0, what="the first record")
            assert c.state.parts[tp].in_flight and c.state.parts[tp].fetch_offset == 1
            await p.send_and_wait(topic, b"second")
            await wait_for(lambda: _poll_into(c, recs, 2), timeout_s=20, interval_s=0, what="the second record")
    assert [r.value for r in recs] == [b"first", b"second"]


async def test_consumer_with_client_rack_reads_from_the_same_rack_follower(shared_cluster):
    # leader 1 (zone-a); the zone-b consumer is sent to broker 2 (KIP-392)
    topic = await new_topic(shared_cluster, assignments=[[1, 2, 3]])
    async with Producer(shared_cluster.bootstrap) as p:
        for i in range(100):
            await p.send(topic, b"%d" % i)
        await p.flush()
    tp = TopicPartition(topic, 0)
    async with Consumer(shared_cluster.bootstrap, {"client.rack": "zone-b", "auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        recs = []
        await wait_for(lambda: _poll_into(c, recs, 100), timeout_s=30, interval_s=0)
        assert [r.value for r in recs] == [b"%d" % i for i in range(100)]
        assert c.preferred_replica(tp) == 2
        assert c.fetched_from(tp) == 2


async def test_consumer_in_the_leaders_rack_stays_on_the_leader(shared_cluster):
    topic = await new_topic(shared_cluster, assignments=[[1, 2, 3]])
    async with Producer(shared_cluster.bootstrap) as p:
        await p.send_and_wait(topic, b"x")
    tp = TopicPartition(topic, 0)
    async with Consumer(shared_cluster.bootstrap, {"client.rack": "zone-a", "auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        recs = []
        await wait_for(lambda: _poll_into(c, recs, 1), timeout_s=20, interval_s=0)
        assert c.fetched_from(tp) == 1 and c.preferred_replica(tp) is None


async def test_admin_lists_describes_and_reports_offsets(shared_cluster):
    topic = await new_topic(shared_cluster, partitions=2)
    async with Producer(shared_cluster.bootstrap) as p:
        for _ in range(5):
            await p.send(topic, b"x", partition=1)
        await p.flush()
    async with Admin(shared_cluster.bootstrap) as admin:
        assert topic in await admin.list_topics()
        (td,) = await admin.describe_topics([topic])
        assert td.configs == {"min.insync.replicas": "2"} and td.replication_factor == 3
        assert [p.leader is not None for p in td.partitions] == [True, True]
        assert await admin.topic_offsets(topic) == {0: 0, 1: 5}
        assert await admin.topic_offsets(topic, EARLIEST_TIMESTAMP) == {0: 0, 1: 0}
        res = await admin.list_offsets({TopicPartition(topic, 1): LATEST_TIMESTAMP})
        assert res[TopicPartition(topic, 1)].offset == 5
        cl = await admin.describe_cluster()
        assert [b.node_id for b in cl.brokers] == [1, 2, 3]
        assert [b.rack for b in cl.brokers] == ["zone-a", "zone-b", "zone-c"]


async def test_creating_an_existing_topic_reports_topic_already_exists(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Admin(shared_cluster.bootstrap) as admin:
        with pytest.raises(KafkaError) as ei:
            await admin.create_topic(topic, 1, 3)
        assert ei.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        await admin.create_topic(topic, 1, 3, if_not_exists=True)


async def test_invalid_replication_factor_is_refused_by_name(shared_cluster):
    async with Admin(shared_cluster.bootstrap) as admin:
        with pytest.raises(KafkaError) as ei:
            await admin.create_topic("too-many-replicas", 1, 5)
    assert ei.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


async def test_preferred_election_on_a_balanced_topic_is_not_needed(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Admin(shared_cluster.bootstrap) as admin:
        res = await admin.elect_leaders("preferred", [TopicPartition(topic, 0)])
    assert res[TopicPartition(topic, 0)].code == ErrorCode.ELECTION_NOT_NEEDED


async def test_replica_status_and_events_answer_from_every_broker(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap) as p:
        await p.send_and_wait(topic, b"x")
    async with Admin(shared_cluster.bootstrap) as admin:
        for b in shared_cluster.broker_ids:
            st = await admin.replica_status(shared_cluster.broker_address(b), [topic])
            assert st["node_id"] == b and st["partitions"][0]["topic"] == topic
            ev = await admin.events(shared_cluster.broker_address(b))
            assert ev["node_id"] == b and ev["events"]
        assert await admin.events(shared_cluster.controller_address)


async def test_a_preferred_replica_missing_from_metadata_refreshes_it_and_reads_from_the_leader_meanwhile(
        shared_cluster):
    """Issue 9's client loop: the zone-b consumer's metadata was fetched while broker 2 (its
    same-rack follower) was fenced, so it does not know 2 when leader 1 names it. One redirect,
    one metadata refresh, records from the leader meanwhile (asked without the rack), then 2;
    never a redirect loop (it was ~4,000 answers/s without records until the next refresh)."""
    topic = await new_topic(shared_cluster, assignments=[[1, 2, 3]])
    async with Producer(shared_cluster.bootstrap) as p:
        for i in range(50):
            await p.send(topic, b"%d" % i)
        await p.flush()
    tp = TopicPartition(topic, 0)
    notes: list[str] = []
    fetches: list[tuple[int, str, int, int]] = []    # (node, rack sent, preferred answered, bytes)
    async with Consumer(shared_cluster.bootstrap, {"client.rack": "zone-b", "auto.offset.reset": "earliest",
                                                   "metadata.max.age.ms": "600000"}) as c:
        c.on_note = notes.append
        cache, net = c.net.cache, c.net
        real_update, real_send = cache.update, net.send_request

        def stale_update(resp, now_ms):          # metadata as fetched while broker 2 was fenced
            if not any(f[2] == 2 for f in fetches):
                resp = {**resp, "brokers": [b for b in resp.get("brokers", ()) if b["node_id"] != 2]}
            return real_update(resp, now_ms)

        def counting_send(node_id, api, body, on_done, **kw):     # the consumer's Fetches go this way
            def counted(resp, error):
                if api == ApiKey.FETCH and resp is not None:
                    for t in resp.get("topics", ()):
                        for e in t.get("partitions", ()):
                            fetches.append((node_id, body.get("rack_id", ""), e.get("preferred_read_replica", -1),
                                            len(e.get("records") or b"")))
                on_done(resp, error)
            real_send(node_id, api, body, counted, **kw)
        cache.update, net.send_request = stale_update, counting_send
        c.assign([tp])
        recs = []
        await wait_for(lambda: _poll_into(c, recs, 50), timeout_s=30, interval_s=0)
        assert [r.value for r in recs] == [b"%d" % i for i in range(50)]

        async def from_two():
            await c.poll(timeout_ms=200)
            return c.fetched_from(tp) == 2
        await wait_for(from_two, timeout_s=30, interval_s=0, what="reading from broker 2")
    redirects = [f for f in fetches if f[2] >= 0]
    assert redirects == [(1, "zone-b", 2, 0)], fetches
    assert any("preferred read replica 2 is not in our metadata" in n for n in notes), notes
    first = fetches.index(redirects[0])
    assert fetches[first + 1][:2] == (1, ""), fetches     # the leader again, without the rack: it serves records


async def test_a_poll_that_hands_out_records_has_written_the_next_fetch_before_it_returns(shared_cluster):
    """KafkaConsumer.pollForFetches: the next Fetch travels while the application works on the
    records. It is written inside the poll that drained them, asking from just past the last one."""
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap, {"acks": "all"}) as p:
        for i in range(300):
            await p.send(topic, b"%d" % i)
        await p.flush()
    sent: list[int] = []
    async with Consumer(shared_cluster.bootstrap, {"auto.offset.reset": "earliest"}) as c:
        real_send = c.net.send_request

        def recording_send(node_id, api, body, on_done, **kw):
            if api == ApiKey.FETCH:
                sent.append(body["topics"][0]["partitions"][0]["fetch_offset"])
            real_send(node_id, api, body, on_done, **kw)
        c.net.send_request = recording_send
        await c.assign_topic(topic)
        got: list = []
        while len(got) < 300:
            before = len(sent)
            recs = await c.poll(timeout_ms=5000)
            assert recs, "no records within 5 s"
            got += recs
            assert len(sent) > before and sent[-1] == recs[-1].offset + 1, (sent, recs[-1].offset)
    assert [r.value for r in got] == [b"%d" % i for i in range(300)]
