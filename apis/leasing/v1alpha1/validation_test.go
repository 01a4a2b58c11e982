package v1alpha1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

func valid() *ProxyLease {
	l := &ProxyLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", ResourceVersion: "1"}}
	SetDefaults_ProxyLease(l)
	return l
}

func fieldsOf(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Field)
	}
	return out
}

func TestValidateProxyLease(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*ProxyLease)
		want   []string
	}{
		{"defaults are valid", func(*ProxyLease) {}, nil},
		{"ttl of one second", func(l *ProxyLease) { l.Spec.TTLSeconds = ptr.To[int32](1) }, nil},
		{"ttl zero", func(l *ProxyLease) { l.Spec.TTLSeconds = ptr.To[int32](0) }, []string{"spec.ttlSeconds"}},
		{"ttl missing", func(l *ProxyLease) { l.Spec.TTLSeconds = nil }, []string{"spec.ttlSeconds"}},
		{"a wait", func(l *ProxyLease) { l.Spec.WaitSeconds = 30 }, nil},
		{"negative wait", func(l *ProxyLease) { l.Spec.WaitSeconds = -1 }, []string{"spec.waitSeconds"}},
		{"selector value too long", func(l *ProxyLease) { l.Spec.Selector = map[string]string{"k": strings.Repeat("v", 254)} }, []string{"spec.selector[k]"}},
		{"too many selector entries", func(l *ProxyLease) {
			l.Spec.Selector = map[string]string{}
			for i := 0; i <= MaxSelectorEntries; i++ {
				l.Spec.Selector[strings.Repeat("k", i+1)] = "v"
			}
		}, []string{"spec.selector"}},
		{"control character in target", func(l *ProxyLease) { l.Spec.Target = "a\x00b" }, []string{"spec.target"}},
		{"a ladder", func(l *ProxyLease) {
			l.Spec.Selectors = []map[string]string{{"tier": "cheap"}, {"tier": "premium"}, {}}
		}, nil},
		{"a ladder beside a selector", func(l *ProxyLease) {
			l.Spec.Selector = map[string]string{"tier": "cheap"}
			l.Spec.Selectors = []map[string]string{{"tier": "premium"}}
		}, []string{"spec.selectors"}},
		{"an empty ladder", func(l *ProxyLease) { l.Spec.Selectors = []map[string]string{} }, []string{"spec.selectors"}},
		{"five tiers", func(l *ProxyLease) { l.Spec.Selectors = make([]map[string]string, MaxSelectors+1) }, []string{"spec.selectors"}},
		{"a bad tier", func(l *ProxyLease) {
			l.Spec.Selectors = []map[string]string{{"tier": "cheap"}, {"": "x"}}
		}, []string{"spec.selectors[1]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := valid()
			tt.mutate(l)
			errs := ValidateProxyLease(l)
			if diff := cmp.Diff(tt.want, fieldsOf(errs)); diff != "" {
				t.Errorf("fields (-want +got):\n%s\n%v", diff, errs)
			}
		})
	}
}

func TestValidateProxyLeaseUpdateOnlyTTLAndMetadataChange(t *testing.T) {
	old := valid()
	old.Spec.Target = "a.com"
	renew := old.DeepCopy()
	renew.Spec.TTLSeconds = ptr.To[int32](600)
	renew.Labels = map[string]string{"x": "y"}
	if errs := ValidateProxyLeaseUpdate(renew, old); len(errs) != 0 {
		t.Errorf("renewal rejected: %v", errs)
	}
	for name, mutate := range map[string]func(*ProxyLease){
		"spec.target":      func(l *ProxyLease) { l.Spec.Target = "b.com" },
		"spec.selector":    func(l *ProxyLease) { l.Spec.Selector = map[string]string{"a": "b"} },
		"spec.selectors":   func(l *ProxyLease) { l.Spec.Selectors = []map[string]string{{"a": "b"}} },
		"spec.priority":    func(l *ProxyLease) { l.Spec.Priority = 1 },
		"spec.waitSeconds": func(l *ProxyLease) { l.Spec.WaitSeconds = 1 },
		"metadata.name":    func(l *ProxyLease) { l.Name = "other" },
	} {
		l := old.DeepCopy()
		mutate(l)
		errs := ValidateProxyLeaseUpdate(l, old)
		if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), name) {
			t.Errorf("changing %s: %v", name, errs)
		}
	}
}

func TestValidateProxyLeaseReport(t *testing.T) {
	for r, ok := range map[ReportResult]bool{ResultOK: true, ResultRateLimited: true, ResultBanned: true, "": false, "OK": false} {
		errs := ValidateProxyLeaseReport(&ProxyLeaseReport{Result: r})
		if (len(errs) == 0) != ok {
			t.Errorf("result %q: %v", r, errs)
		}
	}
}

func TestFieldSelectorsAreRegistered(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	gvk := SchemeGroupVersion.WithKind("ProxyLease")
	for _, label := range []string{"metadata.name", "metadata.namespace", FieldTarget, FieldHolderIdentity, FieldProxyName, FieldLeaseID} {
		if _, _, err := s.ConvertFieldLabel(gvk, label, "x"); err != nil {
			t.Errorf("%s: %v", label, err)
		}
		if _, ok := SelectableFields(&ProxyLease{})[label]; !ok {
			t.Errorf("SelectableFields lacks %s", label)
		}
	}
	if _, _, err := s.ConvertFieldLabel(gvk, "spec.selector", "x"); err == nil || !strings.Contains(err.Error(), "spec.target") {
		t.Errorf("unsupported field label: %v (want an error listing the supported ones)", err)
	}
}
