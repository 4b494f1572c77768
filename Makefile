# Two set-up commands (see README.md); each installs what it needs first.
PYTHON ?= python3
VENV ?= .venv
STAMP := $(VENV)/.installed

.PHONY: run test bench genconfig pep8 bootstrap

run: $(STAMP)
	$(VENV)/bin/compute-plugins demo

test: $(STAMP)
	COMPUTE_PLUGINS_COMPAT=1 $(VENV)/bin/python -m pytest -q -n auto --dist loadfile tests

bench: $(STAMP)
	$(VENV)/bin/python -m bench

genconfig: $(STAMP)
	$(VENV)/bin/oslo-config-generator --config-file etc/compute-plugins/compute-plugins-config-generator.conf

pep8: $(STAMP)
	$(VENV)/bin/ruff check compute_plugins resources tests bench examples tools
	$(VENV)/bin/mypy

bootstrap: $(STAMP)

$(STAMP): setup.cfg bindep.txt
	tools/install-bindep.sh
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)
