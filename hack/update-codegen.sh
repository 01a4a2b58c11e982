#!/usr/bin/env bash
# Regenerates the Proxy API's generated files: the deepcopy functions
# (apis/crawl/v1alpha1/zz_generated.deepcopy.go) and the CRD manifest
# (artifacts/crds/crawl.example.com_proxies.yaml) and the operator ClusterRole
# (artifacts/rbac/role.yaml), and the Helm chart's copy of the CRDs. All are committed;
# `make generate` runs this and `make verify` fails on any diff it leaves.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# Pinned so every machine generates byte-identical output.
controller_gen=sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0

# artifacts/crds holds generated manifests (plus crds.go and kustomization.yaml): clear them so a
# renamed type leaves no stale CRD behind.
rm -f artifacts/crds/*_*.yaml
# gotypesalias=0: the Proxy types use string aliases (AttributeValue,
# GCPLabelValue) to put a schema on map values; controller-gen's deepcopy
# generator mis-handles alias map values when aliases are materialised.
GODEBUG=gotypesalias=0 go run "$controller_gen" \
	object \
	crd \
	paths=./apis/crawl/... \
	output:crd:artifacts:config=artifacts/crds

# The operator's ClusterRole, from the +kubebuilder:rbac markers next to the
# code that needs each verb.
go run "$controller_gen" \
	rbac:roleName=proxy-operator \
	paths=./pkg/controller/... \
	paths=./pkg/pool/... \
	paths=./pkg/sites/... \
	paths=./artifacts/rbac/... \
	output:rbac:artifacts:config=artifacts/rbac

# The Helm chart renders the same CRDs from its own copy (a chart reads no
# file outside its directory); test/e2e/install holds chart and kustomize
# install to each other.
chart_crds=artifacts/charts/proxy-operator/files/crds
rm -rf "$chart_crds"
mkdir -p "$chart_crds"
cp artifacts/crds/*_*.yaml "$chart_crds/"
