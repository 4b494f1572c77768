"""The host-state store's tables (SQLAlchemy Core) and their version.

Every table name starts with ``hoststate_`` so that the store can share a
database with other services. ``hoststate_version`` holds one row: the
schema version this code wrote; :func:`check_version` compares it with
:data:`SCHEMA_VERSION` when a store opens.

Text columns (JSON documents, serialised specs) are ``TEXT`` (``LONGTEXT``
on MySQL, whose ``TEXT`` stops at 64 KiB): the store compares documents in
their canonical form, which a JSON column type would reformat. Timestamps
are naive UTC with microseconds (``DATETIME(6)`` on MySQL).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

#: The schema this code reads and writes. Bump it with every change to the
#: tables below (and say in :data:`UPGRADES` what an older one lacks).
#: 2: ``hoststate_version.version`` is its primary key. 3: the store's
#: identity (``hoststate_store``) and the agents' leases
#: (``hoststate_leases``). 4: the hosts an operator disabled
#: (``hoststate_disabled``). 5: the moves of instances between hosts
#: (``hoststate_moves``). 6: the kind of a disabled host's fence
#: (``hoststate_disabled.kind``: an operator's, or an evacuation's). 7: the
#: change numbers (``hoststate_hosts.change_number``, ``hoststate_changes``)
#: and the leases' expiry index: a scheduler reads only the hosts that
#: changed since its last read, and the down ones (issue 19, item 2).
SCHEMA_VERSION = 7

_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
_TIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
# NOTE: utf8mb4 for every MySQL table: MariaDB's default utf8 is 3 bytes.
# (dict[str, Any]: Table takes dialect options as **kw: Any.)
_MYSQL: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_engine": "InnoDB",
                          "mariadb_charset": "utf8mb4", "mariadb_engine": "InnoDB"}

metadata = sa.MetaData()

# NOTE: every table has a primary key: MySQL with sql_require_primary_key
# (common on managed servers) refuses a table without one, Galera cannot
# replicate its deletes reliably, nor PostgreSQL's logical replication its
# updates.
version = sa.Table(
    "hoststate_version", metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    **_MYSQL,
)

#: One row per host: its generation (bumped by every write of the host's
#: states, node name or providers) and its node name. ``change_number`` is
#: the store's change number of its last write (:data:`changes`), so that a
#: reader asks for the hosts changed since the number it read last
#: (:mod:`compute_plugins.hoststate.changes`); 0: not written since the
#: store was upgraded to version 7 (read by full reads only).
hosts = sa.Table(
    "hoststate_hosts", metadata,
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("nodename", sa.String(255), nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
    sa.Column("change_number", sa.BigInteger, nullable=False, server_default="0"),
    sa.Index("hoststate_hosts_change_number", "change_number"),
    **_MYSQL,
)

#: One row per host and plugin: the document ``fit.encode_state`` made,
#: canonical JSON.
states = sa.Table(
    "hoststate_states", metadata,
    sa.Column("host", sa.String(255),
              sa.ForeignKey("hoststate_hosts.host", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("plugin", sa.String(255), primary_key=True),
    sa.Column("document", _TEXT, nullable=False),
    **_MYSQL,
)

#: The host's resource providers: uuid -> name. A uuid belongs to one host.
providers = sa.Table(
    "hoststate_providers", metadata,
    sa.Column("uuid", sa.String(36), primary_key=True),
    sa.Column("host", sa.String(255),
              sa.ForeignKey("hoststate_hosts.host", ondelete="CASCADE"),
              nullable=False, index=True),
    sa.Column("name", sa.String(255), nullable=False),
    **_MYSQL,
)

#: Decisions addressed to hosts. ``active_consumer`` is the consumer while
#: the decision is pending, claimed or releasing and NULL after: its unique
#: constraint keeps one decision in force per consumer (NULLs never clash,
#: on every backend; a partial index would not work on MySQL).
decisions = sa.Table(
    "hoststate_decisions", metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"),
              primary_key=True, autoincrement=True),
    sa.Column("consumer", sa.String(36), nullable=False, index=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("spec", _TEXT, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("reasons", _TEXT, nullable=True),
    sa.Column("active_consumer", sa.String(36), nullable=True, unique=True),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
    sa.Index("hoststate_decisions_host_status", "host", "status", "id"),
    **_MYSQL,
)

#: The store's identity: one row (``id`` 1), a uuid made when the row is
#: first needed. An agent's ledger records the store it reconciled with: a
#: store with another uuid (recreated, or emptied) is re-filled from the
#: ledger, never taken as "every claim was released".
store_identity = sa.Table(
    "hoststate_store", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("uuid", sa.String(36), nullable=False),
    sa.Column("created_at", _TIME, nullable=False),
    **_MYSQL,
)

#: One row per host: the lease of the agent that serves it. ``epoch`` is
#: the fencing token, bumped by every acquisition; ``node`` the holder's
#: node uuid (its state directory's identity), ``holder`` its pid and
#: machine, in words; the lease lapses at ``expires_at`` unless renewed.
leases = sa.Table(
    "hoststate_leases", metadata,
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("node", sa.String(36), nullable=False),
    sa.Column("holder", sa.String(255), nullable=False),
    sa.Column("expires_at", _TIME, nullable=False),
    # NOTE: a scheduler reads the expired leases only (``expires_at <=
    # now``: the down hosts), never every renewal.
    sa.Index("hoststate_leases_expires_at", "expires_at"),
    **_MYSQL,
)

#: One row per host an operator disabled (``compute-plugins host disable``):
#: no new decision goes to it (the scheduler skips it, and its agent keeps
#: ``COMPUTE_STATUS_DISABLED`` on its root provider), its instances stay.
#: ``reason`` is the operator's text (empty: none given), ``disabled_by``
#: who ran the command (user@machine), ``disabled_at`` when. No foreign key
#: to ``hoststate_hosts``: a host stays disabled while its published rows
#: are dropped and written again (a rename moves the row). ``kind`` says who
#: fenced it: ``operator`` (only ``host enable`` ends it) or ``evacuated``
#: (``evacuate``: its agent lifts it once back and reconciled).
disabled = sa.Table(
    "hoststate_disabled", metadata,
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("reason", _TEXT, nullable=False),
    sa.Column("disabled_by", sa.String(255), nullable=False),
    sa.Column("disabled_at", _TIME, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False, server_default="operator"),
    **_MYSQL,
)

#: One row per move of an instance (resize, migration: :mod:`compute_plugins.
#: hoststate.moves`). ``migration`` is the migration consumer (it holds the
#: source's allocation and claim during the move), ``consumer`` the
#: instance's; ``active_consumer`` is the instance while the move is in force
#: and NULL once it ended (unique: one move in force per instance).
#: ``source_decision`` is the instance's claim on the source (re-keyed to the
#: migration consumer during the move), ``dest_decision`` the destination's
#: claim once made. ``spec`` is the move's RequestSpec (to_json), ``reasons``
#: why a move found no host (JSON, as the decisions').
moves = sa.Table(
    "hoststate_moves", metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"),
              primary_key=True, autoincrement=True),
    sa.Column("migration", sa.String(36), nullable=False, unique=True),
    sa.Column("consumer", sa.String(36), nullable=False, index=True),
    sa.Column("active_consumer", sa.String(36), nullable=True, unique=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("source", sa.String(255), nullable=False),
    sa.Column("dest", sa.String(255), nullable=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("source_decision", sa.BigInteger, nullable=False),
    sa.Column("dest_decision", sa.BigInteger, nullable=True),
    sa.Column("spec", _TEXT, nullable=False),
    sa.Column("reasons", _TEXT, nullable=True),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
    **_MYSQL,
)

#: The store's change counter: one row (``id`` 1). ``last_number`` is the
#: last change number given: every write of a host's row takes the next one
#: in its transaction, last (:func:`compute_plugins.hoststate.changes.stamp`),
#: so the numbers are given in commit order and a reader that read number N
#: has seen every change up to N. ``removals`` counts the deletions of host
#: rows (a rename): a reader that sees it move reads every host again.
changes = sa.Table(
    "hoststate_changes", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("last_number", sa.BigInteger, nullable=False),
    sa.Column("removals", sa.BigInteger, nullable=False),
    **_MYSQL,
)

#: The tables besides ``hoststate_version``, in creation order.
DATA_TABLES = (hosts, states, providers, decisions, store_identity, leases, disabled,
               moves, changes)

#: Older schema version -> the tables it lacks: opening such a store
#: creates them (portable ``CREATE TABLE``), adds the columns of
#: :data:`ADDED_COLUMNS` its existing tables lack, and records
#: :data:`SCHEMA_VERSION`. A version not listed here is refused
#: (:class:`~compute_plugins.hoststate.errors.SchemaVersionMismatch`).
UPGRADES = {2: (store_identity, leases, disabled, moves, changes),
            3: (disabled, moves, changes), 4: (moves, changes), 5: (changes,),
            6: (changes,)}

#: Columns added to an existing table since it was made: (table, column),
#: each added by a portable ``ALTER TABLE ... ADD COLUMN`` with its server
#: default when an upgraded store's table lacks it.
ADDED_COLUMNS = ((disabled, "kind"), (hosts, "change_number"))

#: Indexes added to an existing table since it was made: each created when
#: an upgraded store's table lacks it (a table the upgrade creates has its
#: indexes already).
ADDED_INDEXES = tuple(index for table in (hosts, leases) for index in sorted(
    table.indexes, key=lambda index: str(index.name)))
