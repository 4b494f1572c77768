"""The host-state tables themselves."""

from __future__ import annotations

from compute_plugins.hoststate import schema


def test_every_table_has_a_primary_key():
    """MySQL with sql_require_primary_key refuses a table without one;
    Galera and PostgreSQL's logical replication need one."""
    assert {t.name: bool(t.primary_key.columns) for t in schema.metadata.sorted_tables} == {
        t.name: True for t in schema.metadata.sorted_tables}


def test_every_table_is_prefixed():
    assert all(t.name.startswith("hoststate_") for t in schema.metadata.sorted_tables)
    assert set(schema.metadata.sorted_tables) == {schema.version, *schema.DATA_TABLES}
