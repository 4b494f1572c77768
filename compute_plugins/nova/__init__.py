"""Adapters that let nova use the plugins (nova is an optional extra).

- :mod:`compute_plugins.nova.spec`: our RequestSpec from nova's
  ``objects.RequestSpec`` (``compute_plugins.nova.spec.from_nova``), and the decision
  carried in nova's spec (a scheduler hint) so the compute reads it back;
- :mod:`compute_plugins.nova.filters`: ``PluginFitFilter``, a nova host
  filter running every plugin's ``fit`` per allocation candidate;
- :mod:`compute_plugins.nova.driver`: ``PluginProviderTreeMixin``, a virt
  driver's ``update_provider_tree`` done by the plugins on nova's own tree.

Only these modules import nova; the rest of the project never does.
"""
