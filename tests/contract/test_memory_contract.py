"""The memory store contract, on the in-memory store and on DynamoDB (moto, template table)."""

from __future__ import annotations

import boto3
import pytest

from durable_agents.aws.memory_table import DynamoDBMemoryStore
from durable_agents.engine.memory_store import MemoryStore, check_key, namespace_for

NOW = 1_800_000_000_000  # ms
NS = namespace_for("acme", "user:alice")


@pytest.fixture
def store(memory_store: MemoryStore) -> MemoryStore:
    """Both memory stores (``memory_store`` in tests/conftest.py)."""
    return memory_store


def test_put_then_get_round_trips(store: MemoryStore) -> None:
    assert store.get(NS, "tone", now_ms=NOW) is None
    assert store.put(NS, "tone", '"formal"', op_id="r1:put:1", expires_at=None, now_ms=NOW)
    item = store.get(NS, "tone", now_ms=NOW)
    assert item is not None
    assert (item.key, item.value, item.written_by) == ("tone", '"formal"', "r1:put:1")


def test_a_re_executed_write_is_a_no_op_even_after_a_newer_write(store: MemoryStore) -> None:
    assert store.put(NS, "tone", '"formal"', op_id="r1:put:1", expires_at=None, now_ms=NOW)
    # A later operation (another run) writes a newer value...
    assert store.put(NS, "tone", '"casual"', op_id="r2:put:1", expires_at=None, now_ms=NOW)
    # ...then run 1 crashes before recording its write and re-executes it: refused.
    assert not store.put(NS, "tone", '"formal"', op_id="r1:put:1", expires_at=None, now_ms=NOW)
    item = store.get(NS, "tone", now_ms=NOW)
    assert item is not None and item.value == '"casual"'


def test_a_re_executed_delete_does_not_delete_a_newer_write(store: MemoryStore) -> None:
    store.put(NS, "tone", '"formal"', op_id="r1:put:1", expires_at=None, now_ms=NOW)
    assert store.delete(NS, "tone", op_id="r1:del:2", now_ms=NOW)
    assert store.get(NS, "tone", now_ms=NOW) is None
    store.put(NS, "tone", '"casual"', op_id="r2:put:1", expires_at=None, now_ms=NOW)
    assert not store.delete(NS, "tone", op_id="r1:del:2", now_ms=NOW)
    assert store.get(NS, "tone", now_ms=NOW) is not None


def test_an_item_is_invisible_from_its_expiry_on(store: MemoryStore) -> None:
    expires_at = NOW // 1000 + 60
    store.put(NS, "otp", '"123"', op_id="r1:put:1", expires_at=expires_at, now_ms=NOW)
    assert store.get(NS, "otp", now_ms=NOW + 59_999) is not None
    assert store.get(NS, "otp", now_ms=NOW + 60_000) is None
    page = store.list(NS, "", limit=10, after=None, now_ms=NOW + 60_000)
    assert page.items == ()


def test_prefix_listing_pages_in_key_order_and_skips_expired(store: MemoryStore) -> None:
    for i in range(7):
        store.put(NS, f"pref:{i}", str(i), op_id=f"r1:put:{i}", expires_at=None, now_ms=NOW)
    store.put(NS, "pref:3a", "0", op_id="r1:x:1", expires_at=NOW // 1000, now_ms=NOW)
    store.put(NS, "other", "0", op_id="r1:y:1", expires_at=None, now_ms=NOW)
    keys: list[str] = []
    after = None
    pages = 0
    while True:
        page = store.list(NS, "pref:", limit=3, after=after, now_ms=NOW)
        assert len(page.items) <= 3
        keys += [item.key for item in page.items]
        pages += 1
        if page.next_key is None:
            break
        after = page.next_key
    assert keys == [f"pref:{i}" for i in range(7)]
    assert pages == 3


def test_namespaces_are_isolated_per_tenant(store: MemoryStore) -> None:
    other = namespace_for("globex", "user:alice")
    store.put(NS, "tone", '"formal"', op_id="r1:put:1", expires_at=None, now_ms=NOW)
    assert store.get(other, "tone", now_ms=NOW) is None
    assert store.list(other, "", limit=10, after=None, now_ms=NOW).items == ()
    # The write markers never show up as items of a namespace.
    assert [i.key for i in store.list(NS, "", limit=10, after=None, now_ms=NOW).items] == ["tone"]


@pytest.mark.parametrize("scope", ["", "a#b", "x" * 129, "-lead"])
def test_a_scope_cannot_reach_into_another_namespace(scope: str) -> None:
    with pytest.raises(ValueError, match="scope"):
        namespace_for("acme", scope)
    with pytest.raises(ValueError, match="tenant"):
        namespace_for("acme#globex", "user")


def test_the_deployment_builds_the_dynamodb_store_from_memory_table(aws: None) -> None:
    from durable_agents.aws.deployment import Settings, build_runtime

    env = {"JOURNAL_TABLE": "journal", "EVENT_BUS_NAME": "bus", "MEMORY_TABLE": "memory"}
    settings = Settings.from_env(env)
    assert settings.memory_table == "memory"
    runtime = build_runtime(settings, session=boto3.session.Session(region_name="us-east-1"))
    assert isinstance(runtime.memory, DynamoDBMemoryStore)
    without = build_runtime(
        Settings.from_env({"JOURNAL_TABLE": "journal", "EVENT_BUS_NAME": "bus"}),
        session=boto3.session.Session(region_name="us-east-1"),
    )
    assert without.memory is None


@pytest.mark.parametrize("key", ["", "a\nb", "𝄞" * 129, "k" * 513])
def test_keys_the_table_could_refuse_are_refused_up_front(key: str) -> None:
    with pytest.raises(ValueError, match="key"):
        check_key(key)


def test_the_longest_key_fits_the_table(store: MemoryStore) -> None:
    key = "𝄞" * 128  # 512 bytes
    assert store.put(NS, key, "1", op_id="r1:put:1", expires_at=None, now_ms=NOW)
    assert store.get(NS, key, now_ms=NOW) is not None
    assert len(store.list(NS, key, limit=1, after=None, now_ms=NOW).items) == 1
