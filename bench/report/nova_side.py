"""nova's side of ``python -m bench.report``, run by nova's Python.

A worker: reads one JSON object per line on stdin and answers one JSON line
on stdout. The first line is ``{"url": ...}``; then ``{"node": N, "size":
S, "do": "periodic"}`` runs nova 34's compute periodic for the root ``N``
(a tree of ``S`` providers) against that Placement as
``ResourceTracker._update_to_placement`` does
(``get_provider_subtree_and_ensure_root``,
``get_allocations_for_provider_tree``, ``update_provider_tree``,
``update_from_provider_tree``) with nova's ``SchedulerReportClient`` and
``ProviderTree``, and answers ``[calls, seconds]``; ``"do": "change"``
changes one provider's inventory of that tree for the next periodic.
A worker, so that the driver can interleave nova's periodics with ours.
"""

import collections
import json
import os
import sys
import time
import warnings

warnings.simplefilter("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from keystoneauth1 import adapter, session, token_endpoint  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova.scheduler.client import report  # noqa: E402

from bench.report import shape as shapes  # noqa: E402
from compute_plugins.placement.client import path_template  # noqa: E402

COUNTS: collections.Counter[str] = collections.Counter()


class CountingAdapter(adapter.Adapter):
    def request(self, url, method, **kwargs):
        COUNTS["%s %s" % (method.upper(), path_template(url))] += 1
        return super().request(url, method, **kwargs)


def main():
    url = json.loads(sys.stdin.readline())["url"]
    sess = session.Session(auth=token_endpoint.Token(url, "admin"))
    client = report.SchedulerReportClient(adapter=CountingAdapter(
        sess, service_type="placement", raise_exc=False))
    ctx = nova_context.get_admin_context()
    trees = {}

    def periodic(node, shape):
        COUNTS.clear()
        start = time.perf_counter()
        tree = client.get_provider_subtree_and_ensure_root(
            ctx, shapes.provider_uuid(node), name=node)
        client.get_allocations_for_provider_tree(ctx, node)
        shape(tree, node)
        client.update_from_provider_tree(ctx, tree)
        return [dict(COUNTS), time.perf_counter() - start]

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        order = json.loads(line)
        shape = trees.setdefault(order["node"], shapes.Shape(order["size"]))
        if order["do"] == "change":
            shape.change()
            answer = {"ok": True}
        else:
            answer = periodic(order["node"], shape)
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
