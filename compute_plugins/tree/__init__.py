"""The host side: plugins' contributions merged into the provider tree
(nova's ``update_provider_tree`` semantics), the contributions checkpoint,
reshapes, and printable trees."""
