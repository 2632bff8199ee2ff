"""In-process moto's DynamoDB at the cost of what a request touches, for scale tests and benches.

moto 5 does three things per request that cost the whole table, so N runs cost O(N^2) and a
table of a few thousand runs makes each commit take seconds: ``faster_moto`` patches them
(see its docstring). What a request answers is unchanged; only its cost is. Used by
``tests/contract/test_sharded_scale.py`` and ``scripts/bench_flow.py``; never by the runtime.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from types import SimpleNamespace
from typing import Any, Protocol

import moto.dynamodb.models as moto_dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table

__all__ = ["faster_moto", "patch_transaction_backups"]


class Patcher(Protocol):
    """What patches attributes and undoes it later (``pytest.MonkeyPatch``)."""

    def setattr(self, target: Any, name: str, value: Any) -> None:
        """Sets ``target.name`` to ``value`` until undone."""


def faster_moto(monkeypatch: Patcher) -> None:
    """Makes in-process moto's DynamoDB cost about what a request touches, not the table.

    moto 5 does three things per request that cost the whole table, so N runs cost O(N^2) and
    a 2,000-run table makes each commit take seconds:

    * ``TransactWriteItems`` backs the table up with ``copy.deepcopy`` (once per item it
      writes) to roll back a failed condition. The backup here shares every item partition the
      transaction does not touch (it writes no other) and deep-copies those it does: the same
      rollback, at the cost of the transaction's own items.
    * A query of the table (``pk = ...``) sorts every item of the table, then keeps one
      partition. Here it is handed that partition (the query sorts it by range key itself).
    * Every other read sorts every item with ``DynamoType`` comparisons. Here the sorted list
      is kept until an item is put or deleted (the only writes that change which items there
      are), and sorted on the keys' plain values (the same order for our string keys).

    What a request answers is unchanged; only its cost is.
    """
    patch_transaction_backups(monkeypatch)
    real_query, real_put, real_delete = Table.query, Table.put_item, Table.delete_item
    partition_of: list[Any] = []  # the partition a table query reads (innermost last)

    def all_items(self: Table) -> list[Any]:
        if partition_of and partition_of[-1] is not None and self.range_key_attr:
            return (
                list(self.items[partition_of[-1]].values())
                if partition_of[-1] in self.items
                else []
            )
        cached = self.__dict__.get("_sorted_items")
        if cached is None:
            every = [
                i
                for part in self.items.values()
                for i in (part.values() if self.range_key_attr else [part])
            ]
            cached = sorted(
                every,
                key=lambda i: (
                    (i.hash_key.cast_value, i.range_key.cast_value)
                    if self.range_key_attr
                    else (i.hash_key.cast_value,)
                ),
            )
            self.__dict__["_sorted_items"] = cached
        return list(cached)

    def query(self: Table, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        partition_of.append(hash_key if index_name is None else None)
        try:
            return real_query(self, hash_key, *args, **kwargs)
        finally:
            partition_of.pop()

    def put_item(self: Table, *args: Any, **kwargs: Any) -> Any:
        self.__dict__.pop("_sorted_items", None)
        return real_put(self, *args, **kwargs)

    def delete_item(self: Table, *args: Any, **kwargs: Any) -> Any:
        self.__dict__.pop("_sorted_items", None)
        return real_delete(self, *args, **kwargs)

    monkeypatch.setattr(Table, "all_items", all_items)
    monkeypatch.setattr(Table, "query", query)
    monkeypatch.setattr(Table, "put_item", put_item)
    monkeypatch.setattr(Table, "delete_item", delete_item)


def patch_transaction_backups(monkeypatch: Patcher) -> None:
    """Moto's transaction backup, of the items the transaction touches only.

    moto deep-copies the whole table to roll a refused transaction back. The backup here
    shares every item the transaction does not write (it changes no other) and deep-copies the
    ones it does: the same rollback, at the cost of the transaction's own items.
    """
    touched: set[Any] = set()  # (hash key, range key or None) of each item written

    def backup(obj: Any, memo: Any = None) -> Any:
        if not isinstance(obj, Table):
            return copy.deepcopy(obj, memo)
        snapshot = copy.copy(obj)
        snapshot.__dict__.pop("_sorted_items", None)  # its own items: sorted afresh
        snapshot.items = defaultdict(dict)
        hashes = {hash_key for hash_key, _ in touched}
        for hash_key, part in obj.items.items():
            if hash_key not in hashes:
                snapshot.items[hash_key] = dict(part) if obj.range_key_attr else part
            elif not obj.range_key_attr:
                snapshot.items[hash_key] = copy.deepcopy(part)
            else:
                snapshot.items[hash_key] = {
                    range_key: copy.deepcopy(item) if (hash_key, range_key) in touched else item
                    for range_key, item in part.items()
                }
        return snapshot

    real = DynamoDBBackend.transact_write_items

    def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
        touched.clear()
        for item in transact_items:
            op = next(iter(item.values()))
            table = self.tables.get(op.get("TableName"))
            key = op.get("Key") or op.get("Item") or {}
            if table is not None and table.hash_key_attr in key:
                range_attr = table.range_key_attr
                range_key = DynamoType(key[range_attr]) if range_attr in key else None
                touched.add((DynamoType(key[table.hash_key_attr]), range_key))
        real(self, transact_items)

    monkeypatch.setattr(DynamoDBBackend, "transact_write_items", transact_write_items)
    monkeypatch.setattr(moto_dynamodb_models, "copy", SimpleNamespace(deepcopy=backup))
