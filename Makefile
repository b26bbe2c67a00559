# KGWE — two commands matter: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kgwe-installed

.PHONY: venv lint test demo cluster-bins schemas clean

# (Re)install whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "KGWE needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# ruff (style, formatting), mypy (types of kgwe/) and import-linter (the pure core stays pure); all in pyproject.
lint: venv
	$(BIN)/ruff check kgwe tests bench
	$(BIN)/ruff format --check kgwe tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# Builds kube-apiserver, kube-scheduler, kwok and etcd from Go modules into ~/.cache/kgwe (reused when present).
cluster-bins:
	hack/cluster-bins.sh

schemas: venv
	$(BIN)/kgwe schema --out schemas --crds deploy/crds

test: venv cluster-bins lint
	$(BIN)/python -m pytest

demo: venv cluster-bins
	$(BIN)/kgwe demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .import_linter_cache .hypothesis
