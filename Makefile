# KGWE — two commands matter: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kgwe-installed

.PHONY: venv lint test demo cluster-bins node-bins tool-bins schemas deploy image image-lock clean

# (Re)install whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11, 4) else "KGWE needs Python >= 3.11.4")'
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

# The local cluster's real node besides kubelet/kube-proxy: containerd, CNI plugins, CoreDNS (Go modules
# hack/containerd, hack/cni, hack/coredns) and the pause binary into ~/.cache/kgwe; runc, nft, iptables, ip
# from Debian when missing (as root).
node-bins:
	hack/node-bins.sh

# Builds helm, Flux's kustomize-controller, Prometheus and promtool (wrapper modules hack/helm, hack/flux,
# hack/prometheus) into ~/.cache/kgwe.
tool-bins:
	hack/tool-bins.sh helm
	hack/tool-bins.sh flux
	hack/tool-bins.sh prometheus
	hack/tool-bins.sh dpconfig

# The OCI image of every KGWE process, built without a daemon (mmdebstrap + buildah; needs root). Writes
# build/image/kgwe-VERSION.oci.tar; the last line printed is "ARCHIVE REFERENCE".
image:
	hack/image/build.sh

# Re-pin the image's dependencies (hack/image/*.lock) after changing them in pyproject.toml.
image-lock:
	hack/image/lock.sh

# The CRDs go into the Helm chart (its single source); `make deploy` renders them into deploy/crds/.
schemas: venv
	$(BIN)/kgwe schema --out schemas --crds deploy/helm/kgwe/files/crds
	hack/pod-template-schema.sh
	hack/render-deploy.sh

# deploy/ (the kustomize base) is the chart deploy/helm/kgwe rendered with its default values.
deploy: venv
	hack/render-deploy.sh

test: venv cluster-bins node-bins tool-bins lint
	$(BIN)/python -m pytest

demo: venv cluster-bins
	$(BIN)/kgwe demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .import_linter_cache .hypothesis
