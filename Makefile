# KGWE — two commands matter: `make demo` and `make test`; `make check` is the inner loop.
PYTHON ?= python3
# pytest-xdist workers: `make test` runs tests in parallel where they wait (control planes, Git, processes),
# `make check` where they compute (3 on 2 cores: a third worker fills the time the others wait). Tests that share a control plane, the real node, the image or PostgreSQL
# stay on one worker (tests/harness/pytest_lanes.py).
TEST_WORKERS  ?= 4
CHECK_WORKERS ?= 3
# Groups in the order of their recorded times, longest first (tests/harness/pytest_lanes.py).
PARALLEL := --dist loadgroup --no-loadscope-reorder
# The marks of the tests `make check` leaves out (set by the fixtures they use: tests/harness/pytest_lanes.py).
SLOW_LANES := cluster or realnode or image or gotool
TOOLS := helm flux prometheus dpconfig kueue  # the Go tools of hack/tool-bins.sh
VENV   := .venv
# The suite's Python processes keep bytecode, and pytest its assertion-rewritten test modules, under .venv even
# where the environment sets PYTHONDONTWRITEBYTECODE: otherwise every worker compiles and rewrites every test
# module again on each run (half the cost of collecting them).
SUITE_ENV := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kgwe-installed

.PHONY: protos venv host-packages test-image previous-image lint check test bins $(addprefix tool-bin-,$(TOOLS)) demo cluster-bins node-bins tool-bins schemas deploy image image-lock clean

# (Re)install whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11, 4) else "KGWE needs Python >= 3.11.4")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# The protobuf code of kgwe/agent/proto/*.proto: every install and wheel build generates it (hack/protos.py is
# hatchling's build hook); this regenerates it by hand after editing a .proto.
protos: venv
	$(BIN)/python hack/protos.py

# ruff (style, formatting), mypy (types of kgwe/), import-linter (the pure core stays pure) and deptry (every
# import a declared dependency, every dependency used); all in pyproject.
lint: venv
	$(BIN)/ruff check kgwe tests bench
	$(BIN)/ruff format --check kgwe tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/deptry kgwe tests bench

# The Debian packages of the real node, the image build and the real-node tests (one list:
# hack/host-packages.sh), installed once with apt-get, as root, before anything runs in parallel.
host-packages:
	hack/host-packages.sh

# Builds kube-apiserver, kube-scheduler, kwok and etcd from Go modules into ~/.cache/kgwe (reused when present).
cluster-bins:
	hack/cluster-bins.sh

# The local cluster's real node besides kubelet/kube-proxy: containerd, CNI plugins, CoreDNS (Go modules
# hack/containerd, hack/cni, hack/coredns) and the pause binary into ~/.cache/kgwe; runc, nft, iptables, ip
# from Debian when missing (as root).
node-bins:
	hack/node-bins.sh

# Builds helm, Flux's kustomize-controller, Prometheus and promtool, the device-plugin config reader and
# Kueue's manager (wrapper modules hack/helm, hack/flux, hack/prometheus, hack/dpconfig, hack/kueue) into
# ~/.cache/kgwe.
tool-bins: $(addprefix tool-bin-,$(TOOLS))
$(addprefix tool-bin-,$(TOOLS)): tool-bin-%:
	hack/tool-bins.sh $*

# The OCI image of every KGWE process, built without a daemon (mmdebstrap + buildah; needs root). Writes
# build/image/kgwe-VERSION.oci.tar; the last line printed is "ARCHIVE REFERENCE".
image:
	hack/image/build.sh

# Re-pin the image's dependencies (hack/image/*.lock) after changing them in pyproject.toml.
image-lock:
	hack/image/lock.sh

# The CRDs go into the Helm chart (its single source); `make deploy` renders them into deploy/crds/. The
# field tables of docs/spec/ come from the same models.
schemas: venv
	$(BIN)/kgwe schema --out schemas --crds deploy/helm/kgwe/files/crds --docs docs/spec \
		--admission deploy/helm/kgwe/files/admission/routing.yaml
	hack/pod-template-schema.sh
	hack/render-deploy.sh

# deploy/ (the kustomize base) is the chart deploy/helm/kgwe rendered with its default values.
deploy: venv
	hack/render-deploy.sh

# The inner loop: lint, then every test that needs no control plane, no Go-built tool and no image.
check: lint
	$(SUITE_ENV) $(BIN)/python -m pytest -n $(CHECK_WORKERS) $(PARALLEL) -m "not ($(SLOW_LANES))"

# The image the image and install tests use, in the cache they reuse it from (rebuilt only when its inputs change).
KGWE_CACHE ?= $(or $(KGWE_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kgwe)
KGWE_IMAGE_DIR ?= $(KGWE_CACHE)/image
test-image: host-packages
	KGWE_IMAGE_DIR=$(KGWE_IMAGE_DIR) hack/image/build.sh >/dev/null

# The chart and image of the KGWE commit the upgrade test starts from (tests/compat/previous-commit): built once
# into the cache by that commit's own build script, after test-image (whose base layers it reuses).
previous-image: test-image
	KGWE_IMAGE_DIR=$(KGWE_IMAGE_DIR) hack/previous-image.sh >/dev/null

# Every build the suite needs, in parallel (module downloads overlap compiles; each script takes its own lock),
# after the one install step.
bins: host-packages
	nice -n 10 $(MAKE) -j4 --no-print-directory cluster-bins node-bins tool-bins test-image previous-image

# The whole suite (CI runs it; nothing is skipped).
test: venv lint host-packages bins
	$(SUITE_ENV) $(BIN)/python -m pytest -n $(TEST_WORKERS) $(PARALLEL)

demo: venv cluster-bins
	$(BIN)/kgwe demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .import_linter_cache .hypothesis
