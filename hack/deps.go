//go:build tools

// Package hack pins dependencies that the product will import, so that go mod tidy keeps them.
package hack

import (
	_ "cloud.google.com/go/compute/apiv1"
	_ "cloud.google.com/go/compute/apiv1/computepb"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/spf13/pflag"
	_ "golang.org/x/sync/errgroup"
	_ "google.golang.org/api/option"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	_ "k8s.io/apimachinery/pkg/runtime"
	_ "k8s.io/apiserver/pkg/endpoints/openapi"
	_ "k8s.io/apiserver/pkg/registry/rest"
	_ "k8s.io/apiserver/pkg/server"
	_ "k8s.io/apiserver/pkg/server/options"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/component-base/compatibility"
	_ "k8s.io/component-base/logs"
	_ "k8s.io/kube-openapi/pkg/common"
	_ "k8s.io/utils/clock"
	_ "k8s.io/utils/clock/testing"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/client/fake"
	_ "sigs.k8s.io/yaml"
)
