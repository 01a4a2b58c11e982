package health

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/pflag"
)

func TestSettingsFlagsAndApply(t *testing.T) {
	s := DefaultSettings()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	s.AddFlags(fs)
	if err := fs.Parse([]string{"--health-workers=3", "--health-tick=250ms", "--health-min-report-interval=5s", "--health-event-buffer=7"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	var o Options
	s.Apply(&o)
	want := Options{Workers: 3, Tick: 250 * time.Millisecond, MinReportInterval: 5 * time.Second, EventBuffer: 7}
	if d := cmp.Diff(want, o, cmpopts.IgnoreFields(Options{}, "Clock", "Reader", "Prober", "Metrics")); d != "" {
		t.Errorf("applied options (-want +got):\n%s", d)
	}
}
