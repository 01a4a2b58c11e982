package restart

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/metrics"
)

// One token's reports cannot grow the operator without bound (#26 item 4):
// 20,000 reports with distinct 1 KB targets and 20,000 with distinct
// targets of the longest allowed length, from leases of one token, grow the
// operator's RSS by less than 50 MiB and leave the checkpoint one Secret.
// On the code before, every report with a new target started a cooldown:
// the 20,000 long targets made a checkpoint of several Secrets.
func TestReportsCannotGrowTheOperator(t *testing.T) {
	const reports = 20000
	e := setup(t)
	op := e.start(t)
	c := e.client(t)
	e.waitHealthy(t, c)
	ctx := context.Background()

	var ids []string
	for range 20 {
		l, err := c.Acquire(ctx, wire.AcquireRequest{TTLSeconds: 3600})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, l.LeaseID)
	}
	// Warm the path (TLS sessions, buffers) before the first measure.
	for i := range 200 {
		if err := c.Report(ctx, ids[i%len(ids)], wire.ResultOK, ""); err != nil {
			t.Fatal(err)
		}
	}
	before := rss(t, op.Pid())

	// Random hex: a checkpoint compresses it no better than real sites.
	target := func(n int) string {
		b := make([]byte, n/2+1)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)[:n]
	}
	var accepted, tooLong, limited atomic.Int64
	err := parallel(workers, func(w int) error {
		for i := w; i < 2*reports; i += workers {
			n := 1024
			if i%2 == 1 {
				n = leasingv1alpha1.MaxTargetLen
			}
			err := c.Report(ctx, ids[i%len(ids)], wire.ResultRateLimited, target(n))
			var apiErr *dclient.APIError
			switch {
			case err == nil:
				accepted.Add(1)
			case errors.As(err, &apiErr) && apiErr.StatusCode == 400 && apiErr.Code == wire.CodeInvalidRequest && n > leasingv1alpha1.MaxTargetLen:
				tooLong.Add(1)
			case errors.As(err, &apiErr) && apiErr.StatusCode == 403 && apiErr.Code == wire.CodeCooldownLimit:
				limited.Add(1)
			default:
				return fmt.Errorf("report %d (target of %d bytes): %w", i, n, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after := rss(t, op.Pid())
	t.Logf("reports: %d accepted, %d refused as too long, %d over the cooldown limit; RSS %d → %d MiB",
		accepted.Load(), tooLong.Load(), limited.Load(), before>>20, after>>20)
	if got, want := accepted.Load(), int64(lease.DefaultMaxCooldownsPerHolder); got != want {
		t.Errorf("%d reports started a cooldown, want %d (the per-holder limit)", got, want)
	}
	if tooLong.Load() != reports {
		t.Errorf("%d reports with 1 KB targets refused as too long, want all %d", tooLong.Load(), reports)
	}
	if grew := int64(after) - int64(before); grew >= 50<<20 {
		t.Errorf("the operator's RSS grew by %d MiB, want less than 50", grew>>20)
	}

	// The checkpoint written after the last report fits one shard besides
	// its index (and its journal, if any).
	done := float64(time.Now().Unix() + 1)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return metric(fmt.Sprintf("http://127.0.0.1:%d/metrics", e.ports[3]), metrics.CheckpointLastCurrentName) >= done, nil
	}); err != nil {
		t.Fatalf("no checkpoint after the reports: %v", err)
	}
	list, err := e.kube.CoreV1().Secrets(operatorNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	shards := 0
	for _, s := range list.Items {
		if s.Name == "leases" || strings.HasPrefix(s.Name, "leases-") {
			names = append(names, s.Name)
			if parts := strings.Split(s.Name, "-"); len(parts) == 3 && !strings.HasPrefix(parts[2], "j") {
				shards++
			}
		}
	}
	if shards != 1 {
		t.Errorf("the checkpoint takes the Secrets %v, want one shard", names)
	}
}

// metric is the value of the unlabelled sample name at url (-1 if none).
func metric(url, name string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// rss is the resident set of process pid, in bytes.
func rss(t *testing.T, pid int) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/<pid>/status")
	return 0
}
