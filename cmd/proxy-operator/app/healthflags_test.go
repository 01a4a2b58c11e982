package app

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/pkg/health"
)

func TestHealthFlags(t *testing.T) {
	o, err := parseDev(t, "--health-workers=16", "--health-tick=500ms", "--health-min-report-interval=2m", "--health-event-buffer=128",
		"--health-denied-cidrs=10.0.0.0/8,fd00::/8")
	if err != nil {
		t.Fatal(err)
	}
	want := health.Settings{Workers: 16, Tick: 500 * time.Millisecond, MinReportInterval: 2 * time.Minute, EventBuffer: 128,
		DeniedCIDRs: []string{"10.0.0.0/8", "fd00::/8"}}
	if d := cmp.Diff(want, o.Health); d != "" {
		t.Errorf("health options (-want +got):\n%s", d)
	}
	if d := cmp.Diff(health.Settings{Workers: health.DefaultWorkers, Tick: health.DefaultTick,
		MinReportInterval: health.DefaultMinReportInterval, EventBuffer: health.DefaultEventBuffer,
		DeniedCIDRs: []string{"169.254.0.0/16", "fe80::/10"}}, NewOptions().Health); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
	_, err = parseDev(t, "--health-workers=0", "--health-tick=0s", "--health-min-report-interval=-1s", "--health-event-buffer=0",
		"--health-denied-cidrs=169.254.0.0/16,metadata")
	for _, flag := range []string{"--health-workers", "--health-tick", "--health-min-report-interval", "--health-event-buffer", `--health-denied-cidrs: "metadata"`} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("error %v does not name %s", err, flag)
		}
	}
}
