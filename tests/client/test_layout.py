from minibroker.config import Config, parse_listeners
from minibroker.broker.server import listener_plan
from minibroker.testing.layout import CONTROLLER_ID, ClusterLayout, plan

HOSTS = [f"127.0.0.{i}" for i in range(1, 10)]


def well_known(proxied=True, **kw):
    return plan("/d", brokers=3, hosts=HOSTS, controller_host="127.0.0.1", port_for=lambda h, d: d,
                proxied=proxied, **kw)


def test_well_known_layout_puts_brokers_on_loopback_aliases_port_9092():
    lay = well_known()
    assert lay.bootstrap == "127.0.0.1:9092,127.0.0.2:9092,127.0.0.3:9092"
    assert lay.controller == ("127.0.0.1", 9093)
    assert [b.rack for b in lay.brokers] == ["zone-a", "zone-b", "zone-c"]


def test_every_broker_dials_peers_and_controller_through_its_own_routes():
    lay = well_known()
    for b in lay.brokers:
        cfg = lay.broker_config(b.node_id)
        assert cfg["inter.broker.listener.name"] == f"INTERNAL_B{b.node_id}"
        ctl = lay.route(b.node_id, CONTROLLER_ID)
        assert cfg["controller.quorum.bootstrap.servers"] == f"{ctl.listen[0]}:{ctl.listen[1]:d}"
        adv = parse_listeners(cfg["advertised.listeners"])
        for other in lay.brokers:
            if other.node_id != b.node_id:
                # peer `other` reaches b on INTERNAL_B<other>, which b advertises at route other->b
                r = lay.route(other.node_id, b.node_id)
                assert adv[f"INTERNAL_B{other.node_id}"] == r.listen
                assert r.target == b.internal[f"INTERNAL_B{other.node_id}"]


def test_broker_configs_pass_the_brokers_own_listener_plan():
    lay = well_known()
    for b in lay.brokers:
        binds, advertised, inter = listener_plan(Config(lay.broker_config(b.node_id)))
        assert inter == f"INTERNAL_B{b.node_id}"
        assert advertised["EXTERNAL"] == (b.host, 9092)


def test_all_listen_addresses_are_distinct():
    lay = well_known()
    addrs = [lay.controller, lay.proxy_control] + [(b.host, b.port) for b in lay.brokers] + \
            [a for b in lay.brokers for a in b.internal.values()] + [r.listen for r in lay.routes]
    assert len(addrs) == len(set(addrs))


def test_unproxied_layout_uses_one_internal_listener_and_dials_the_controller_directly():
    lay = well_known(proxied=False)
    cfg = lay.broker_config(2)
    assert cfg["inter.broker.listener.name"] == "INTERNAL"
    assert cfg["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert lay.routes == () and lay.proxy_control is None


def test_overrides_reach_brokers_and_controller():
    lay = well_known(broker_overrides={"min.insync.replicas": "2"}, controller_overrides={"node.id": "0"})
    assert lay.broker_config(1)["min.insync.replicas"] == "2"
    assert lay.controller_config()["min.insync.replicas"] == "2"


def test_layout_round_trips_through_the_state_file_form():
    lay = well_known(broker_overrides={"a": "b"})
    assert ClusterLayout.from_dict(lay.to_dict()) == lay


def test_racks_are_cycled_over_the_brokers_in_id_order():
    lay = plan("/d", brokers=6, hosts=HOSTS, controller_host="127.0.0.1", port_for=lambda h, d: d,
               racks=("a", "b", "c"))
    assert [b.rack for b in lay.brokers] == ["a", "b", "c", "a", "b", "c"]
    assert [lay.broker_config(b.node_id)["broker.rack"] for b in lay.brokers] == ["a", "b", "c", "a", "b", "c"]


def test_a_layout_where_two_listeners_share_an_address_is_refused():
    import pytest
    with pytest.raises(ValueError, match="would both listen on 127.0.0.1:5000"):
        plan("/d", brokers=3, hosts=HOSTS, controller_host="127.0.0.1", port_for=lambda h, d: 5000)


def test_free_ports_never_hands_out_the_same_port_twice_on_one_host():
    from minibroker.testing.cluster import FreePorts
    free = FreePorts()
    try:
        ports = [free("127.0.0.1") for _ in range(200)]
    finally:
        free.close()
    assert len(set(ports)) == len(ports)


def test_random_port_layouts_are_always_valid():
    from minibroker.testing.cluster import FreePorts
    for _ in range(20):
        free = FreePorts()
        try:
            plan("/d", brokers=3, hosts=HOSTS, controller_host="127.0.0.1", port_for=free)
        finally:
            free.close()


def test_a_tls_layout_maps_every_listener_to_ssl_and_names_the_secret_file_not_the_secret():
    lay = well_known(tls=True)
    for b in lay.brokers:
        cfg = lay.broker_config(b.node_id)
        mapped = dict(e.split(":") for e in cfg["listener.security.protocol.map"].split(","))
        assert set(parse_listeners(cfg["listeners"])) | {"CONTROLLER"} == set(mapped)
        assert set(mapped.values()) == {"SSL"} and cfg["controller.listener.names"] == "CONTROLLER"
        assert cfg["minibroker.cluster.secret.file"] == "/d/cluster.secret"
        assert "minibroker.cluster.secret" not in cfg
    assert lay.controller_config()["listener.security.protocol.map"] == "CONTROLLER:SSL"
    assert lay.client_properties() == {"security.protocol": "SSL", "ssl.truststore.location": "/d/tls/ca.pem"}
    assert well_known().client_properties() == {}
    assert ClusterLayout.from_dict(lay.to_dict()) == lay
