package proxylease

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

var reportKind = leasingv1alpha1.Kind("ProxyLeaseReport")

// ReportREST is proxyleases/{name}/report: creating a ProxyLeaseReport (like
// a Pod eviction) records a result and is answered with a Status. A lease
// that ended within the cooldown window still accepts reports.
type ReportREST struct {
	svc *leasing.Service
}

// NewReportREST returns the report subresource's storage over svc.
func NewReportREST(svc *leasing.Service) *ReportREST { return &ReportREST{svc: svc} }

var (
	_ rest.Storage      = (*ReportREST)(nil)
	_ rest.Scoper       = (*ReportREST)(nil)
	_ rest.NamedCreater = (*ReportREST)(nil)
)

func (r *ReportREST) New() runtime.Object   { return &leasingv1alpha1.ProxyLeaseReport{} }
func (r *ReportREST) Destroy()              {}
func (r *ReportREST) NamespaceScoped() bool { return true }

// Create records the report on lease name.
func (r *ReportREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	rep, ok := obj.(*leasingv1alpha1.ProxyLeaseReport)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a ProxyLeaseReport: %T", obj))
	}
	namespace := genericapirequest.NamespaceValue(ctx)
	if rep.Name != "" && rep.Name != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("metadata.name %q of the report does not match the lease %q", rep.Name, name))
	}
	if rep.Namespace != "" && rep.Namespace != namespace {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("metadata.namespace %q of the report does not match the request's %q", rep.Namespace, namespace))
	}
	if errs := leasingv1alpha1.ValidateProxyLeaseReport(rep); len(errs) > 0 {
		return nil, apierrors.NewInvalid(reportKind, name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, rep); err != nil {
			return nil, err
		}
	}
	if options != nil && dryrun.IsDryRun(options.DryRun) {
		if ok, err := r.svc.Reportable(ctx, namespace, name); err != nil {
			return nil, statusFor(reportKind, name, nil, err, nil)
		} else if !ok {
			return nil, apierrors.NewNotFound(proxyLeaseResource, name)
		}
		return reportStatus(name, rep, true), nil
	}
	// RBAC decides who may report on ProxyLeases, and of those only the
	// holder on its own (403 for another's). A lease lost in an operator
	// crash (name proves it) gets the cooldown, and stays lost.
	holder, err := actingHolder(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := r.svc.ReportByName(holder, namespace, name, string(rep.Result), rep.Target); err != nil {
		return nil, statusFor(reportKind, name, nil, err, nil)
	}
	return reportStatus(name, rep, false), nil
}

func reportStatus(name string, rep *leasingv1alpha1.ProxyLeaseReport, dryRun bool) *metav1.Status {
	msg := fmt.Sprintf("reported %s on lease %s", rep.Result, name)
	if rep.Target != "" {
		msg += fmt.Sprintf(" for target %q", rep.Target)
	}
	if dryRun {
		msg += " (dry run: not recorded)"
	}
	return &metav1.Status{
		Status:  metav1.StatusSuccess,
		Message: msg,
		Details: &metav1.StatusDetails{Group: proxyLeaseResource.Group, Kind: proxyLeaseResource.Resource, Name: name},
	}
}
