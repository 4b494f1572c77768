# Two set-up commands (see README.md); each installs what it needs first:
# `make run` (and docs) only the runtime requirements, `make test` (and pep8, bench)
# the test extra on top.
PYTHON ?= python3
VENV ?= .venv
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test bench soak genconfig pep8 docs bootstrap nova-functional \
	nova-functional-ci nova-functional-expected

run: $(RUN_STAMP)
	$(VENV)/bin/compute-plugins demo

test: $(TEST_STAMP)
	COMPUTE_PLUGINS_COMPAT=1 $(VENV)/bin/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder tests

bench: $(TEST_STAMP)
	$(VENV)/bin/python -m bench

# A longer soak than the suite's (SOAK_ARGS: --duration S --seed N ...).
soak: $(TEST_STAMP)
	$(VENV)/bin/python -m bench soak $(SOAK_ARGS)

genconfig: $(RUN_STAMP)
	$(VENV)/bin/oslo-config-generator --config-file etc/compute-plugins/compute-plugins-config-generator.conf

pep8: $(TEST_STAMP)
	$(VENV)/bin/ruff check compute_plugins resources tests bench examples tools
	$(VENV)/bin/mypy

# The Sphinx documentation (doc/source -> doc/build/html), warnings as errors.
docs: $(RUN_STAMP)
	$(VENV)/bin/pip install -q -r doc/requirements.txt
	$(VENV)/bin/sphinx-build -W -b html doc/source doc/build/html

bootstrap: $(TEST_STAMP)

# nova 34's own functional libvirt tests (from its wheel), stock and with
# PluginFitFilter and the driver mixin (tools/nova_functional, see
# doc/source/nova-compat.md), compared with every test's expected outcome
# (tools/nova_functional/expected.toml): one line per difference, one line
# per test file and the boots whose guest XML matched the filter's decision;
# exit 1 on any difference. A separate venv: nova's test fixtures need
# SQLAlchemy < 2.1. NOVA_FILES=test_numa_servers for one file,
# NOVA_MODES=plugins for one side, NOVA_JOBS files at a time.
NOVA_VENV ?= .venv-nova
NOVA_STAMP := $(NOVA_VENV)/.installed
NOVA_OUT ?= nova-functional
NOVA_FILES ?=
NOVA_MODES ?= stock,plugins
NOVA_JOBS ?= 2
NOVA_RUN = $(NOVA_VENV)/bin/python -m tools.nova_functional

nova-functional: $(NOVA_STAMP)
	rm -rf $(NOVA_OUT)
	$(NOVA_RUN) run --modes $(NOVA_MODES) -j $(NOVA_JOBS) --out $(NOVA_OUT) $(NOVA_FILES)

# What .ci/run runs: the plugins side of the CI scope (expected.toml's [ci]
# exclude leaves the slowest classes to nova-functional), two files at a
# time, each stopped after 20 minutes, against the recorded stock outcomes;
# a test that differs from them is run once more in a fresh process first.
nova-functional-ci: $(NOVA_STAMP)
	rm -rf $(NOVA_OUT)
	$(NOVA_RUN) run --modes plugins --ci -j $(NOVA_JOBS) --file-timeout 1200 --out $(NOVA_OUT) $(NOVA_FILES)

# Rewrite expected.toml from a full run (NOVA_MODES=plugins: the plugins side
# only, the stock outcomes kept); the run's differences do not stop it.
nova-functional-expected: $(NOVA_STAMP)
	rm -rf $(NOVA_OUT)
	-$(NOVA_RUN) run --modes $(NOVA_MODES) -j $(NOVA_JOBS) --out $(NOVA_OUT) $(NOVA_FILES)
	$(NOVA_RUN) expect $(NOVA_OUT)

$(NOVA_STAMP): setup.cfg tools/nova_functional/requirements.txt
	test -x $(NOVA_VENV)/bin/python || $(PYTHON) -m venv $(NOVA_VENV)
	$(NOVA_VENV)/bin/pip install -q -r tools/nova_functional/requirements.txt -e .
	touch $@

# The runtime requirements only: what the demo needs (bindep.txt without its
# test profile).
$(RUN_STAMP): setup.cfg bindep.txt
	tools/install-bindep.sh
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e .
	touch $@

# The test extra (pytest, linters, nova, database drivers) on top, with the
# Debian packages of bindep.txt's test profile (the database servers, umockdev).
$(TEST_STAMP): $(RUN_STAMP)
	tools/install-bindep.sh test
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@
