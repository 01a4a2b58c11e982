package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

func TestClassify(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	podKind := schema.GroupKind{Kind: "Pod"}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"404 not found", apierrors.NewNotFound(pods, "p"), provider.ErrNotFound},
		{"403 RBAC denial", apierrors.NewForbidden(pods, "p", errors.New("user cannot create pods")), provider.ErrPermanent},
		{"403 exceeded ResourceQuota is still permanent (see classOf)",
			apierrors.NewForbidden(pods, "p", errors.New("exceeded quota: compute, requested: pods=1, used: pods=10, limited: pods=10")), provider.ErrPermanent},
		{"422 invalid pod", apierrors.NewInvalid(podKind, "p", field.ErrorList{field.Required(field.NewPath("spec"), "")}), provider.ErrPermanent},
		{"400 bad request", apierrors.NewBadRequest("nope"), provider.ErrPermanent},
		{"413 too large", apierrors.NewRequestEntityTooLargeError("cloud-init too big"), provider.ErrPermanent},
		{"405 method not supported", apierrors.NewMethodNotSupported(pods, "patch"), provider.ErrPermanent},
		{"409 conflict", apierrors.NewConflict(pods, "p", errors.New("object modified")), provider.ErrTransient},
		{"429 too many requests", apierrors.NewTooManyRequests("slow down", 1), provider.ErrTransient},
		{"500 internal", apierrors.NewInternalError(errors.New("etcd hiccup")), provider.ErrTransient},
		{"503 unavailable", apierrors.NewServiceUnavailable("starting"), provider.ErrTransient},
		{"504 server timeout", apierrors.NewServerTimeout(pods, "create", 1), provider.ErrTransient},
		{"timeout", apierrors.NewTimeoutError("timed out", 1), provider.ErrTransient},
		{"401 unauthorized", apierrors.NewUnauthorized("token expired"), provider.ErrTransient},
		{"deadline exceeded", context.DeadlineExceeded, provider.ErrTransient},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, provider.ErrTransient},
		{"wrapped 404", fmt.Errorf("reading: %w", apierrors.NewNotFound(pods, "p")), provider.ErrNotFound},
		{"wrapped 403", fmt.Errorf("creating: %w", apierrors.NewForbidden(pods, "p", errors.New("no"))), provider.ErrPermanent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(provider.OpCreate, tc.err)
			if !provider.IsClassified(got) {
				t.Fatalf("classify(%v) = %v: not classified", tc.err, got)
			}
			if c := provider.Class(got); c != tc.want {
				t.Errorf("class of classify(%v) = %v, want %v", tc.err, c, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("classify(%v) = %v: lost the cause", tc.err, got)
			}
		})
	}
	if got := classify(provider.OpGet, nil); got != nil {
		t.Errorf("classify(nil) = %v, want nil", got)
	}
}
