"""The hash ring, the hash key and the sharding options (pure parts of decision 0011)."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from setpoint.api.clock import ManualClock
from setpoint.manager import LeaderElectionOptions, ManagerOptions
from setpoint.manager.sharder import Sharder
from setpoint.manager.sharding import (
    ANNOTATION_VIRTUAL_NODES,
    RING_LABEL,
    VIRTUAL_NODES,
    HashRing,
    ShardingOptions,
    ShardKey,
    default_shard_id,
    drain_label,
    hash_key_of,
    shard_label,
)
from setpoint.manager.shardmember import ShardMember
from setpoint.testing import FakeClient

UIDS = [str(uuid.UUID(int=i * 7919 + 1)) for i in range(6000)]


def owners(ring: HashRing, keys: list[str]) -> dict[str, str | None]:
    return {key: ring.owner(key) for key in keys}


def test_three_shards_each_own_about_a_third() -> None:
    """6,000 UIDs over three shards: each gets within 15% of a third, shares sum to one."""
    ring = HashRing(["alpha", "beta", "gamma"])
    counts = Counter(ring.owner("uid/" + u) for u in UIDS)
    assert set(counts) == {"alpha", "beta", "gamma"}
    for shard, count in counts.items():
        assert 2000 * 0.85 <= count <= 2000 * 1.15, (shard, count)
    assert sum(ring.shares().values()) == pytest.approx(1.0)


def test_the_same_members_give_the_same_ring_in_any_order() -> None:
    """Assignment depends only on the member names (no seed, no order): every process agrees."""
    keys = ["uid/" + u for u in UIDS[:500]]
    assert owners(HashRing(["a", "b", "c"]), keys) == owners(HashRing(["c", "a", "b", "a"]), keys)


def test_adding_a_shard_moves_about_a_quarter_and_only_to_it() -> None:
    """3 -> 4 shards moves about 1/4 of the keys, each to the new shard, none between old ones."""
    keys = ["uid/" + u for u in UIDS]
    before = owners(HashRing(["a", "b", "c"]), keys)
    after = owners(HashRing(["a", "b", "c", "d"]), keys)
    moved = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == "d" for k in moved)
    assert 0.18 <= len(moved) / len(keys) <= 0.32


def test_removing_a_shard_moves_only_its_keys() -> None:
    """A shard leaving hands its keys to the others; nobody else's keys move."""
    keys = ["uid/" + u for u in UIDS]
    before = owners(HashRing(["a", "b", "c"]), keys)
    after = owners(HashRing(["a", "c"]), keys)
    for key in keys:
        if before[key] != "b":
            assert after[key] == before[key]
        else:
            assert after[key] in ("a", "c")


def test_an_empty_ring_owns_nothing() -> None:
    """No live shard: no owner, so the sharder leaves objects unassigned."""
    ring = HashRing([])
    assert not ring
    assert ring.owner("uid/x") is None
    assert ring.shares() == {}


def test_hash_key_is_the_uid_or_the_namespace() -> None:
    """UID by default; NAMESPACE groups a namespace's objects, cluster-scoped fall back to UID."""
    obj = {"metadata": {"name": "a", "namespace": "team", "uid": "u-1"}}
    cluster_scoped = {"metadata": {"name": "a", "uid": "u-2"}}
    assert hash_key_of(obj, ShardKey.UID) == "uid/u-1"
    assert hash_key_of(obj, ShardKey.NAMESPACE) == "ns/team"
    assert hash_key_of(cluster_scoped, ShardKey.NAMESPACE) == "uid/u-2"
    ring = HashRing(["a", "b", "c"])
    same_ns = {
        ring.owner(hash_key_of({"metadata": {"namespace": "team", "uid": u}}, ShardKey.NAMESPACE))
        for u in UIDS[:50]
    }
    assert len(same_ns) == 1


def test_label_keys_name_the_ring() -> None:
    """The shard and drain label keys carry the ring's name, so rings do not collide."""
    assert shard_label("widgets") == "shard.sharding.setpoint.dev/widgets"
    assert drain_label("widgets") == "drain.sharding.setpoint.dev/widgets"


def test_default_shard_id_is_a_unique_dns_label(monkeypatch: pytest.MonkeyPatch) -> None:
    """Host name (sanitised) plus a random suffix: a valid label value, unique per call."""
    monkeypatch.setenv("HOSTNAME", "My_Host.example.COM")
    first, second = default_shard_id(), default_shard_id()
    assert first != second
    assert first.startswith("my-host-example-com-")
    ShardingOptions(ring="r", controllers=("c",), shard_id=first)  # accepted as a shard id


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"ring": "Bad_Ring"}, "ShardingOptions.ring='Bad_Ring' must be a DNS label"),
        ({"ring": "r" * 51}, "at most 50 characters"),
        ({"controllers": ()}, "ShardingOptions.controllers=() must be a tuple of at least one"),
        ({"controllers": "widget"}, "must be a tuple"),
        ({"controllers": ("a/b",)}, "'a/b' is not a controller name"),
        ({"shard_id": "Shard 1"}, "ShardingOptions.shard_id='Shard 1' must be a DNS label"),
        ({"renew_deadline": 20.0}, "ShardingOptions.renew_deadline (20 s) must be shorter"),
        ({"lease_duration": 7.5}, "ShardingOptions.lease_duration=7.5 must be a whole number"),
        ({"sharder_workers": 0}, "ShardingOptions.sharder_workers must be >= 1"),
        ({"virtual_nodes": 0}, "ShardingOptions.virtual_nodes must be >= 1, not 0"),
        ({"virtual_nodes": True}, "ShardingOptions.virtual_nodes must be >= 1, not True"),
        ({"labels": {"sharding.setpoint.dev/ring": "x"}}, "must not set"),
    ],
)
def test_options_name_the_field_and_the_rule(overrides: dict[str, object], message: str) -> None:
    """Each invalid setting is refused with the field's name and what to do."""
    values: dict[str, object] = {"ring": "widgets", "controllers": ("widget",)}
    values.update(overrides)
    with pytest.raises(ValueError) as caught:
        ShardingOptions(**values)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_sharding_needs_leader_election() -> None:
    """The sharder runs in the leader, so sharding without leader election is refused."""
    sharding = ShardingOptions(ring="widgets", controllers=("widget",))
    with pytest.raises(ValueError, match="sharding needs leader_election"):
        ManagerOptions(sharding=sharding)
    ManagerOptions(sharding=sharding, leader_election=LeaderElectionOptions(name="widgets"))


def test_the_ring_points_reach_the_sharders_ring_and_each_shard_lease() -> None:
    """``virtual_nodes`` shapes the sharder's ring; each replica advertises it for doctor."""
    options = ShardingOptions(ring="widgets", controllers=("widget",), virtual_nodes=1000)
    member = ShardMember(FakeClient(), options, namespace="default")
    assert member.annotations()[ANNOTATION_VIRTUAL_NODES] == "1000"
    default = ShardingOptions(ring="widgets", controllers=("widget",))
    assert ShardMember(FakeClient(), default, namespace="default").annotations()[
        ANNOTATION_VIRTUAL_NODES
    ] == str(VIRTUAL_NODES)

    sharder = Sharder(
        FakeClient(),
        options,
        namespace="default",
        kinds=(),
        identity="test",
        clock=ManualClock(),
    )
    for name in ("alpha", "beta"):
        sharder._lease_seen(
            {
                "metadata": {"name": name, "labels": {RING_LABEL: "widgets"}},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 15},
            }
        )
    assert sharder.ring.shards == ("alpha", "beta")
    expected = HashRing(["alpha", "beta"], virtual_nodes=1000).shares()
    assert sharder.ring.shares() == pytest.approx(expected)
    assert expected != pytest.approx(HashRing(["alpha", "beta"]).shares())
