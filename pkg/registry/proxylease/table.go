package proxylease

import (
	"context"
	"fmt"
	neturl "net/url"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/clock"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// tableConvertor renders `kubectl get proxyleases`: NAME, PROXY, TARGET,
// HOLDER, EXPIRES (time left), AGE; -o wide adds URL and LEASE-ID.
type tableConvertor struct {
	clock clock.PassiveClock
}

var tableColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the lease."},
	{Name: "Proxy", Type: "string", Description: "The leased Proxy (status.proxy.name)."},
	{Name: "Target", Type: "string", Description: "The site the lease is for (spec.target)."},
	{Name: "Holder", Type: "string", Description: "The user who holds the lease (status.holderIdentity)."},
	{Name: "Expires", Type: "string", Description: "Time left until the lease expires (status.expireTime)."},
	{Name: "Age", Type: "date", Description: "Time since the lease was acquired."},
	{Name: "URL", Type: "string", Priority: 1, Description: "Proxy URL (status.proxy.url)."},
	{Name: "Lease-ID", Type: "string", Priority: 1, Description: "ID of the lease in the HTTP API (status.leaseID)."},
}

func (t tableConvertor) ConvertToTable(_ context.Context, obj, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{}
	opts, _ := tableOptions.(*metav1.TableOptions)
	if opts == nil || !opts.NoHeaders {
		table.ColumnDefinitions = tableColumns
	}
	now := t.clock.Now()
	switch o := obj.(type) {
	case *leasingv1alpha1.ProxyLease:
		table.ResourceVersion = o.ResourceVersion
		table.Rows = []metav1.TableRow{row(o, now)}
	case *leasingv1alpha1.ProxyLeaseList:
		table.ResourceVersion = o.ResourceVersion
		table.Continue = o.Continue
		table.Rows = make([]metav1.TableRow, 0, len(o.Items))
		for i := range o.Items {
			table.Rows = append(table.Rows, row(&o.Items[i], now))
		}
	default:
		return nil, fmt.Errorf("cannot render %T as a ProxyLease table", obj)
	}
	return table, nil
}

func row(pl *leasingv1alpha1.ProxyLease, now time.Time) metav1.TableRow {
	proxy, url := "<none>", "<none>"
	if p := pl.Status.Proxy; p != nil {
		proxy, url = p.Name, withoutUserinfo(p.URL)
	}
	target := pl.Spec.Target
	if target == "" {
		target = "<any>"
	}
	expires := "<unknown>"
	if e := pl.Status.ExpireTime; e != nil {
		if left := e.Sub(now); left > 0 {
			expires = duration.HumanDuration(left)
		} else {
			expires = "expired"
		}
	}
	age := "<unknown>"
	if !pl.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(now.Sub(pl.CreationTimestamp.Time))
	}
	return metav1.TableRow{
		Cells:  []any{pl.Name, proxy, target, pl.Status.HolderIdentity, expires, age, url, pl.Status.LeaseID},
		Object: runtime.RawExtension{Object: pl},
	}
}

// withoutUserinfo is a proxy URL as a table shows it: the credentials it
// carries stay in the object (-o yaml), out of terminals and screenshots.
func withoutUserinfo(s string) string {
	u, err := neturl.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}
