# dra-driver: build, test, and try it on a kind cluster or on a local node.
#   make            lists the targets
#   make demo       a real cluster of NODES nodes (default 2) on this machine (no Docker),
#                   the driver image, its Helm chart, the examples; until Ctrl-C (or
#                   `make demo-down`)
#   make all        cluster -> build -> load -> deploy -> network-test -> network-check
# Needs for the kind targets: docker (an engine), kind, kubectl. CLUSTER=local points
# network-test, network-check, logs and debug at the running `make demo` node instead.

PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
DOCKER ?= docker
KIND ?= kind
KUBECTL ?= kubectl

CLUSTER ?= dra-driver
IMAGE ?= dra-driver:dev
KIND_NODE_VERSION ?= v1.36.4
KIND_NODE_IMAGE ?= dra-driver-kind-node:$(KIND_NODE_VERSION)
NAMESPACE ?= dra-system
TIMEOUT ?= 300
# Helm: the binary hack/build-helm.sh builds (make helm), the release, extra arguments
# for helm-install (e.g. HELM_ARGS='--set settings.logLevel=debug -f my-values.yaml').
HELM ?= $(shell hack/build-helm.sh --bin)
CHART = deploy/helm/dra-driver
RELEASE ?= dra-driver
HELM_ARGS ?=
# The chart names its objects after the release (plus -dra-driver unless it has it).
HELM_DAEMONSET = $(if $(findstring dra-driver,$(RELEASE)),$(RELEASE),$(RELEASE)-dra-driver)
LOCAL_DIR ?= /tmp/dra-demo
# The Kubernetes release of the local cluster (e2e, node and cluster tiers, make demo):
# empty for the one hack/k8s/go.mod pins, v1.36.3 for the previous minor
# (hack/k8s/v1.36.3.mod), e.g. `make e2e K8S_VERSION=v1.36.3`.
export K8S_VERSION
# Nodes of the `make demo` cluster.
NODES ?= 2
# Arguments of `make bench`, e.g. BENCH_ARGS='--only node-churn' (the real node's pod
# churn runs only when named: a thousand pods take about eleven minutes).
BENCH_ARGS ?=

KCTL = $(KUBECTL) --context kind-$(CLUSTER)
DRIVER_MANIFESTS = -f deploy/namespace.yaml -f deploy/driver.yaml -f deploy/resourceclass.yaml \
	-f deploy/config-policy.yaml
EXAMPLES = -f deploy/deployment.yaml -f deploy/multi-nic-deployment.yaml
NETWORK_CHECK = $(PYTHON) deploy/network-check.py --kubectl "$(KUBECTL)" --context kind-$(CLUSTER)
CHECK_FILES =
APPLY = apply
ifeq ($(CLUSTER),local)
# The node `make demo` runs: kubectl built here (K8S_VERSION), through the demo's kubeconfig; the
# examples as the demo adapted them to this kernel (e.g. veth where dummy is missing).
LOCAL_KUBECTL = $(shell hack/build-k8s.sh --bin-dir)/kubectl --kubeconfig $(LOCAL_DIR)/kubeconfig \
	--cache-dir $(LOCAL_DIR)/kubectl-cache
KCTL = $(LOCAL_KUBECTL)
CHECK_FILES = $(LOCAL_DIR)/examples/deployment.yaml $(LOCAL_DIR)/examples/multi-nic-deployment.yaml
EXAMPLES = $(addprefix -f ,$(CHECK_FILES))
NETWORK_CHECK = $(PYTHON) deploy/network-check.py --kubectl "$(LOCAL_KUBECTL)"
# The demo applied the examples server-side: so does network-test (no client-side warnings).
APPLY = apply --server-side --force-conflicts
endif

.DEFAULT_GOAL := help
.PHONY: help all kind-image cluster check-dummy build load deploy undeploy network-test \
	network-check restart logs debug clean image test-image unit unit-unprivileged test test-faults lint proto rtnl-fixtures config-policy \
	test-kernel e2e test-cluster \
	bench helm manifests helm-lint helm-install helm-uninstall node-build demo demo-down test-node

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

all: ## everything on kind: cluster, build, load, deploy, network-test, network-check
	$(MAKE) cluster
	$(MAKE) build
	$(MAKE) load
	$(MAKE) deploy
	$(MAKE) network-test
	$(MAKE) network-check

kind-image: ## build the kind node image (kindest/node + containerd/runc with CDI netDevices)
	$(DOCKER) build -t $(KIND_NODE_IMAGE) kind-node

check-dummy: ## check that the host kernel can create dummy interfaces (the examples use them)
	@if [ -d /sys/module/dummy ] || modinfo dummy >/dev/null 2>&1; then \
		echo "host kernel: dummy available"; \
	elif [ "$$(id -u)" = 0 ] && ip link add dradummyprobe type dummy 2>/dev/null; then \
		ip link del dradummyprobe; echo "host kernel: dummy available"; \
	else \
		echo "host kernel $$(uname -r) has no 'dummy' network module; kind nodes share the"; \
		echo "host kernel, so the dummy examples (net1, ctrl0) would fail. Install the"; \
		echo "kernel's extra modules (Debian/Ubuntu: linux-modules-extra-$$(uname -r), Fedora:"; \
		echo "kernel-modules-extra) and run 'sudo modprobe dummy', or set SKIP_DUMMY_CHECK=1."; \
		[ -n "$(SKIP_DUMMY_CHECK)" ] && echo "SKIP_DUMMY_CHECK set: going on without dummy"; \
	fi

cluster: check-dummy ## create the kind cluster (control plane + 2 workers) from kind-config.yaml
	@$(DOCKER) image inspect $(KIND_NODE_IMAGE) >/dev/null 2>&1 || $(MAKE) kind-image
	@if $(KIND) get clusters 2>/dev/null | grep -qx '$(CLUSTER)'; then \
		echo "kind cluster $(CLUSTER) exists"; \
	else \
		$(KIND) create cluster --name $(CLUSTER) --config kind-config.yaml --image $(KIND_NODE_IMAGE); \
	fi

build: ## build the driver image (IMAGE, default dra-driver:dev)
	$(DOCKER) build -t $(IMAGE) .

image: ## build the driver image without Docker (buildah, a Debian base) into .cache/image/ (root)
	IMAGE=$(IMAGE) hack/build-image.sh

test-image: image ## the image tier: opens the image's layers; nothing of this machine in them
	DRA_IMAGE_REQUIRED=1 $(PYTHON) -m pytest tests/image

load: ## load the driver image into the kind nodes
	$(KIND) load docker-image $(IMAGE) --name $(CLUSTER)

deploy: ## install namespace, RBAC, admission policies, DaemonSet and DeviceClasses
	$(KCTL) apply $(DRIVER_MANIFESTS)
	$(KCTL) -n $(NAMESPACE) rollout status daemonset/dra-driver --timeout=$(TIMEOUT)s

helm: ## build helm from the Go module proxy (hack/build-helm.sh, cached in .cache/helm)
	hack/build-helm.sh

manifests: helm ## write deploy/driver.yaml, resourceclass.yaml, config-policy.yaml from the Helm chart
	$(PYTHON) hack/gen_manifests.py --helm $(HELM)

helm-lint: helm ## helm lint --strict of the chart
	$(HELM) lint --strict --namespace $(NAMESPACE) $(CHART)

helm-install: helm ## install or upgrade the chart on kind (RELEASE, HELM_ARGS), wait for the rollout
	$(KCTL) apply -f deploy/namespace.yaml
	$(HELM) upgrade --install $(RELEASE) $(CHART) --kube-context kind-$(CLUSTER) \
		--namespace $(NAMESPACE) $(HELM_ARGS)
	$(KCTL) -n $(NAMESPACE) rollout status daemonset/$(HELM_DAEMONSET) --timeout=$(TIMEOUT)s

helm-uninstall: ## uninstall the chart from kind (the namespace stays)
	$(HELM) uninstall $(RELEASE) --kube-context kind-$(CLUSTER) --namespace $(NAMESPACE)

undeploy: ## remove the examples and the driver
	-$(KCTL) delete --ignore-not-found --wait=true $(EXAMPLES)
	-$(KCTL) delete --ignore-not-found -f deploy/config-policy.yaml -f deploy/resourceclass.yaml \
		-f deploy/driver.yaml
	-$(KCTL) delete --ignore-not-found -f deploy/namespace.yaml

network-test: ## apply the example workloads and wait until their pods run
	$(KCTL) $(APPLY) $(EXAMPLES)
	$(NETWORK_CHECK) --timeout $(TIMEOUT) wait $(CHECK_FILES)

network-check: ## check every example interface in the pods: name, MTU, addresses
	$(NETWORK_CHECK) check $(CHECK_FILES)

restart: ## restart the driver pods (rolling, as an upgrade would)
	$(KCTL) -n $(NAMESPACE) rollout restart daemonset/dra-driver
	$(KCTL) -n $(NAMESPACE) rollout status daemonset/dra-driver --timeout=$(TIMEOUT)s

logs: ## show the driver logs of every node
ifeq ($(CLUSTER),local)
	@if [ -f $(LOCAL_DIR)/cluster.json ]; then \
		$(KCTL) -n $(NAMESPACE) logs -l app.kubernetes.io/name=dra-driver --prefix --tail=200; \
	else tail -n 200 $(LOCAL_DIR)/driver/*.log; fi
else
	$(KCTL) -n $(NAMESPACE) logs -l app.kubernetes.io/name=dra-driver --all-containers \
		--prefix --tail=200 --max-log-requests=10
endif

debug: ## show driver pods, slices, classes, claims, example pods and recent events
	-$(KCTL) get nodes -o wide
	-$(KCTL) -n $(NAMESPACE) get pods -o wide
	-$(KCTL) get deviceclasses
	-$(KCTL) get resourceslices -o yaml
	-$(KCTL) get resourceclaims -A -o wide
	-$(KCTL) get pods -l 'app in (dummy-net1,macvlan-data0,rdma-uverbs,roce,multi-nic)' -o wide
	-$(KCTL) describe pods -l 'app in (dummy-net1,macvlan-data0,rdma-uverbs,roce,multi-nic)' \
		| grep -A20 '^Events:'
	-$(KCTL) get events -A --sort-by=.lastTimestamp | tail -30

clean: ## delete the kind cluster
	-$(KIND) delete cluster --name $(CLUSTER)

unit: ## the first thing to run: root-free, network-free tests (pure logic, generated files), < 1 min
	$(PYTHON) -m pytest tests/unit

unit-unprivileged: ## make unit as an unprivileged user (nobody), from a copy of the checkout
	hack/unit-unprivileged.sh

test: ## the full local suite (root): unit, integration, kernel, deploy and fault tests
	hack/build-k8scheck.sh
	$(PYTHON) -m pytest tests/unit tests/integration tests/kernel tests/deploy tests/faults

test-faults: ## the fault-injection and fuzzing suite alone (FUZZ_EXAMPLES=n for a longer fuzz)
	DRA_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PYTHON) -m pytest tests/faults

lint: ## ruff check, ruff format --check, mypy
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy

proto: ## regenerate the protobuf modules next to dradriver/{kubelet,nri}/proto/*.proto
	$(PYTHON) hack/gen_proto.py

rtnl-fixtures: ## capture this kernel's rtnetlink replies as the codec's test fixtures (root)
	$(PYTHON) hack/gen_rtnl_fixtures.py

config-policy: ## regenerate the chart's config admission policies from the config schema, then deploy/
	$(PYTHON) hack/gen_config_policy.py
	$(MAKE) manifests

test-kernel: ## the handler tests in a full Debian kernel under qemu (dummy, ipvlan, soft-RoCE)
	PYTHON=$(PYTHON) hack/test-kernel.sh

e2e: ## end-to-end tests against a real control plane built from source
	hack/build-k8s.sh && hack/build-helm.sh && $(PYTHON) -m pytest tests/e2e

bench: ## run the benchmarks (python -m bench); the node section needs `make node-build`
	$(PYTHON) -m bench $(BENCH_ARGS)

node-build: ## build the local node: kubelet + control plane, containerd, runc, pause (cached)
	hack/build-k8s.sh
	hack/build-node.sh

demo: node-build helm ## a real cluster here (no Docker): image, chart, examples on NODES nodes; until Ctrl-C
	@$(PYTHON) -c "import dradriver, cryptography, yaml" 2>/dev/null || { echo "make demo:" \
		"first: python3 -m venv .venv && .venv/bin/pip install -e '.[test]'"; exit 1; }
	$(PYTHON) -m localcluster demo up --workdir $(LOCAL_DIR) --nodes $(NODES)

demo-down: ## stop the `make demo` node from another terminal (or clean up a killed one)
	$(PYTHON) -m localcluster demo down --workdir $(LOCAL_DIR)

test-node: node-build ## the node tier: a real kubelet, containerd and runc move interfaces into pods
	DRA_NODE_REQUIRED=1 $(PYTHON) -m pytest tests/node

test-cluster: node-build helm image ## the cluster tier: the image and the chart's DaemonSet on two real nodes
	DRA_CLUSTER_REQUIRED=1 $(PYTHON) -m pytest tests/cluster
