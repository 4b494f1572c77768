"""The simulated hosts: their snapshots and their provider trees in Placement.

Only discovery is simulated. Each host is one of the shapes of
:mod:`bench.schedule.cloud` (2 NUMA cells, 8 cells, GPU, SR-IOV), named
``scale-<shape>-<n>``. The first host of each shape is registered the way
an agent registers it (the real plugins' ``update_provider_tree`` and the
report client's periodic: 11 to 28 Placement calls per host). Every other
host is a copy of its shape's template, written in one transaction into
Placement's own tables (:func:`clone`): providers, inventories, traits and
aggregates as the template has them, under the new host's names and
uuids. That is the bulk path: Placement's API has no call that creates
more than one provider or sets a provider's inventory and traits at once,
so the API's minimum is 2-3 calls per provider (about 17 per host), and a
call costs 10-15 ms in the embedded Placement (a third of it validating
the JSON schema itself on every request): 1,000 hosts would take 3-4
minutes; the copy takes about a second.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from bench.schedule import cloud
from compute_plugins.placement import report
from compute_plugins.plugin import names

SHAPES = cloud.SHAPES


@dataclasses.dataclass(frozen=True)
class SimHost:
    """One simulated host.

    :param name: its host and node name.
    :param shape: one of :data:`SHAPES`.
    :param providers: its providers in Placement, uuid -> name.
    """

    name: str
    shape: str
    providers: dict[str, str]


def host_name(index: int) -> str:
    """The name of the ``index``-th host (shapes in turn)."""
    return "scale-%s-%05d" % (SHAPES[index % len(SHAPES)], index)


def register_template(client: Any, name: str, shape: str) -> tuple[SimHost, float]:
    """Register ``name`` as its agent would (the plugins' tree, the report
    client's periodic): the host with its providers, and the seconds the
    periodic took."""
    plugins = cloud.manager(shape)
    plugins.discover(cloud.host_info(name, shape))
    reporter = report.ReportClient(client, refresh_interval=0, sleep=lambda s: None)
    start = time.monotonic()
    result = reporter.periodic(plugins.update_provider_tree, name)
    seconds = time.monotonic() - start
    if not result.ok:
        raise RuntimeError("host %s: %s" % (name, result.error))
    tree = reporter.provider_tree()
    return SimHost(name, shape, {u: tree.data(u).name
                                 for u in tree.get_provider_uuids_in_tree(name)}), seconds


def _device_keys(template: SimHost) -> dict[str, tuple[str, ...]]:
    """Template provider uuid -> the device key the plugins derive it from
    (:func:`compute_plugins.plugin.names.provider_uuid`: the node name and
    the key), so that a copy's providers have the uuids its own agent's
    plugins would give them (their host states name them).

    :raises RuntimeError: a provider whose key is not one of the host's
        cells or PCI addresses.
    """
    info = cloud.host_info(template.name, template.shape)
    candidates = [("numa", str(cell.id)) for cell in info.cells] + [
        (kind, dev.address) for dev in info.pci_devices for kind in ("pci", "pf")]
    derived: dict[str, tuple[str, ...]] = {
        names.provider_uuid(template.name, *key): key for key in candidates}
    derived[names.provider_uuid(template.name)] = ()
    missing = sorted(set(template.providers) - set(derived))
    if missing:
        raise RuntimeError("host %s: providers %s are not derived from a cell or "
                           "a PCI address: cannot copy its tree"
                           % (template.name, ", ".join(missing)))
    return {u: derived[u] for u in template.providers}


def _tables(engine: sa.Engine) -> dict[str, sa.Table]:
    meta = sa.MetaData()
    meta.reflect(engine, only=["resource_providers", "inventories",
                               "resource_provider_traits",
                               "resource_provider_aggregates"])
    return dict(meta.tables)


def clone(engine: sa.Engine, template: SimHost, names_: list[str]) -> list[SimHost]:
    """Copies of ``template``'s tree named ``names_``, written in one
    transaction into Placement's database (``engine``: Placement's own, see
    :func:`placement_engine`); generation 1 as a fresh registration leaves
    them. Nothing may write to Placement meanwhile."""
    keys = _device_keys(template)
    t = _tables(engine)
    rps, inv, traits, aggs = (t["resource_providers"], t["inventories"],
                              t["resource_provider_traits"],
                              t["resource_provider_aggregates"])
    made: list[SimHost] = []
    if not names_:
        return made
    with engine.begin() as conn:
        rows = conn.execute(sa.select(rps).where(rps.c.uuid.in_(list(template.providers)))
                            .order_by(rps.c.id)).mappings().all()
        ids = [r["id"] for r in rows]
        inv_rows = conn.execute(sa.select(inv).where(
            inv.c.resource_provider_id.in_(ids))).mappings().all()
        trait_rows = conn.execute(sa.select(traits).where(
            traits.c.resource_provider_id.in_(ids))).mappings().all()
        agg_rows = conn.execute(sa.select(aggs).where(
            aggs.c.resource_provider_id.in_(ids))).mappings().all()
        next_rp = int(conn.execute(sa.select(sa.func.max(rps.c.id))).scalar() or 0) + 1
        next_inv = int(conn.execute(sa.select(sa.func.max(inv.c.id))).scalar() or 0) + 1
        new_rps: list[dict[str, Any]] = []
        new_inv: list[dict[str, Any]] = []
        new_traits: list[dict[str, Any]] = []
        new_aggs: list[dict[str, Any]] = []
        for name in names_:
            id_of = {old: next_rp + i for i, old in enumerate(ids)}
            next_rp += len(ids)
            providers: dict[str, str] = {}
            for row in rows:
                pname = name + row["name"][len(template.name):]
                puuid = names.provider_uuid(name, *keys[row["uuid"]])
                providers[puuid] = pname
                new_rps.append(dict(row, id=id_of[row["id"]], uuid=puuid, name=pname,
                                    root_provider_id=id_of[row["root_provider_id"]],
                                    parent_provider_id=id_of.get(row["parent_provider_id"])))
            for row in inv_rows:
                new_inv.append(dict(row, id=next_inv,
                                    resource_provider_id=id_of[row["resource_provider_id"]]))
                next_inv += 1
            new_traits.extend(dict(r, resource_provider_id=id_of[r["resource_provider_id"]])
                              for r in trait_rows)
            new_aggs.extend(dict(r, resource_provider_id=id_of[r["resource_provider_id"]])
                            for r in agg_rows)
            made.append(SimHost(name, template.shape, providers))
        # NOTE: parents before children (the foreign keys): the template's
        # rows are in id order, so the copies' are too.
        for table, values in ((rps, new_rps), (inv, new_inv), (traits, new_traits),
                              (aggs, new_aggs)):
            if values:
                conn.execute(sa.insert(table), values)
        if engine.dialect.name == "postgresql":
            # NOTE: the ids were given: the sequences follow them.
            for table in (rps, inv):
                conn.execute(sa.text(
                    "SELECT setval(pg_get_serial_sequence('%s', 'id'), "
                    "(SELECT max(id) FROM %s))" % (table.name, table.name)))
    return made


def placement_engine() -> sa.Engine:
    """The engine of the Placement this process runs (embedded)."""
    from placement import db_api

    return db_api.placement_context_manager.writer.get_engine()


def build(client: Any, engine: sa.Engine, count: int) -> tuple[list[SimHost], float]:
    """``count`` hosts, shapes in turn: the first of each shape registered by
    the report client, the others cloned from it (:func:`clone`); and the
    seconds a template's periodic took, on average, through the report
    client (the baseline of the bulk path)."""
    templates = {}
    by_api = 0.0
    for index in range(min(count, len(SHAPES))):
        templates[SHAPES[index]], seconds = register_template(
            client, host_name(index), SHAPES[index])
        by_api += seconds / min(count, len(SHAPES))
    hosts = list(templates.values())
    for shape, template in templates.items():
        rest = [host_name(i) for i in range(len(SHAPES), count)
                if SHAPES[i % len(SHAPES)] == shape]
        hosts.extend(clone(engine, template, rest))
    return sorted(hosts, key=lambda h: h.name), by_api


def chunks(items: list[Any], parts: int) -> Iterator[list[Any]]:
    """``items`` dealt into ``parts`` lists (round robin)."""
    for i in range(parts):
        yield items[i::parts]
