"""nova's side of ``python -m bench.report``, run by nova's Python.

Reads one JSON object from argv[1] (``url``, ``node``, ``size``,
``steady``), runs nova 34's compute periodic against that Placement as
``ResourceTracker._update_to_placement`` does
(``get_provider_subtree_and_ensure_root``,
``get_allocations_for_provider_tree``, ``update_provider_tree``,
``update_from_provider_tree``) with nova's ``SchedulerReportClient`` and
``ProviderTree``, and prints one JSON object: calls and seconds per phase.
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

COUNTS = collections.Counter()


class CountingAdapter(adapter.Adapter):
    def request(self, url, method, **kwargs):
        COUNTS["%s %s" % (method.upper(), path_template(url))] += 1
        return super().request(url, method, **kwargs)


def main():
    args = json.loads(sys.argv[1])
    sess = session.Session(auth=token_endpoint.Token(args["url"], "admin"))
    client = report.SchedulerReportClient(adapter=CountingAdapter(
        sess, service_type="placement", raise_exc=False))
    ctx = nova_context.get_admin_context()
    node = args["node"]
    root = shapes.provider_uuid(node)
    shape = shapes.Shape(args["size"])

    def periodic():
        COUNTS.clear()
        start = time.perf_counter()
        tree = client.get_provider_subtree_and_ensure_root(ctx, root,
                                                           name=node)
        client.get_allocations_for_provider_tree(ctx, node)
        shape(tree, node)
        client.update_from_provider_tree(ctx, tree)
        return dict(COUNTS), time.perf_counter() - start

    out = {"first": [periodic()], "steady": [], "change": []}
    for _ in range(args["steady"]):
        out["steady"].append(periodic())
    shape.change()
    out["change"].append(periodic())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
