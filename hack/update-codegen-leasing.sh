#!/usr/bin/env bash
# Regenerates the code of the ProxyLease API (group leasing.crawl.example.com):
#   apis/leasing/v1alpha1/zz_generated.deepcopy.go      deepcopy-gen
#   apis/leasing/v1alpha1/zz_generated.model_name.go    openapi-gen (model names)
#   pkg/generated/openapi/zz_generated.openapi.go       openapi-gen (served OpenAPI, kubectl explain, SSA)
#   pkg/generated/{clientset,listers,informers}         client-gen, lister-gen, informer-gen
# Generators run at pinned versions through `go run`, so nothing needs installing.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "${ROOT}"

MODULE=$(go list -m)
CODEGEN_VERSION=v0.37.2
# openapi-gen is pinned to the kube-openapi version this module already requires.
OPENAPI_VERSION=$(go list -m -f '{{.Version}}' k8s.io/kube-openapi)

APIS_PKG="${MODULE}/apis"
API_PKG="${APIS_PKG}/leasing/v1alpha1"
OUT_PKG="${MODULE}/pkg/generated"
OUT_DIR="${ROOT}/pkg/generated"

HEADER=$(mktemp)
REPORT=$(mktemp)
trap 'rm -f "${HEADER}" "${REPORT}"' EXIT
# The generators put their own "Code generated ... DO NOT EDIT." line under this header.
: > "${HEADER}"

gen() { local cmd=$1; shift; go run "k8s.io/code-generator/cmd/${cmd}@${CODEGEN_VERSION}" "$@"; }

echo "deepcopy-gen"
rm -f apis/leasing/v1alpha1/zz_generated.deepcopy.go
gen deepcopy-gen --go-header-file "${HEADER}" --output-file zz_generated.deepcopy.go "${API_PKG}"

echo "openapi-gen"
rm -f apis/leasing/v1alpha1/zz_generated.model_name.go pkg/generated/openapi/zz_generated.openapi.go
go run "k8s.io/kube-openapi/cmd/openapi-gen@${OPENAPI_VERSION}" \
	--go-header-file "${HEADER}" \
	--output-dir "${OUT_DIR}/openapi" \
	--output-pkg "${OUT_PKG}/openapi" \
	--output-file zz_generated.openapi.go \
	--output-model-name-file zz_generated.model_name.go \
	--report-filename "${REPORT}" \
	k8s.io/apimachinery/pkg/apis/meta/v1 \
	k8s.io/apimachinery/pkg/runtime \
	k8s.io/apimachinery/pkg/version \
	k8s.io/apimachinery/pkg/api/resource \
	"${API_PKG}"

echo "client-gen"
rm -rf "${OUT_DIR}/clientset" "${OUT_DIR}/listers" "${OUT_DIR}/informers"
gen client-gen \
	--go-header-file "${HEADER}" \
	--output-dir "${OUT_DIR}/clientset" \
	--output-pkg "${OUT_PKG}/clientset" \
	--clientset-name versioned \
	--input-base "${APIS_PKG}" \
	--input leasing/v1alpha1

echo "lister-gen"
gen lister-gen \
	--go-header-file "${HEADER}" \
	--output-dir "${OUT_DIR}/listers" \
	--output-pkg "${OUT_PKG}/listers" \
	"${API_PKG}"

echo "informer-gen"
gen informer-gen \
	--go-header-file "${HEADER}" \
	--output-dir "${OUT_DIR}/informers" \
	--output-pkg "${OUT_PKG}/informers" \
	--versioned-clientset-package "${OUT_PKG}/clientset/versioned" \
	--listers-package "${OUT_PKG}/listers" \
	"${API_PKG}"

gofmt -w apis/leasing pkg/generated
