package health

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/pflag"

	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
)

func TestSettingsFlagsAndApply(t *testing.T) {
	s := DefaultSettings()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	s.AddFlags(fs)
	if err := fs.Parse([]string{"--health-workers=3", "--health-tick=250ms", "--health-min-report-interval=5s", "--health-event-buffer=7",
		"--health-denied-cidrs=169.254.0.0/16,10.1.2.3/8"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	var o Options
	s.Apply(&o)
	want := Options{Workers: 3, Tick: 250 * time.Millisecond, MinReportInterval: 5 * time.Second, EventBuffer: 7,
		// A CIDR with host bits denies its whole network.
		Denied: dialpolicy.Denylist{Prefixes: []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("10.0.0.0/8")}}}
	if d := cmp.Diff(want, o, cmpopts.IgnoreFields(Options{}, "Clock", "Reader", "Prober", "Metrics"), cmpopts.EquateComparable(netip.Prefix{})); d != "" {
		t.Errorf("applied options (-want +got):\n%s", d)
	}
}
