"""compute-plugins: a plugin-based, Nova-compatible resource framework."""
