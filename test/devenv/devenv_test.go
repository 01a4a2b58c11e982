package devenv

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestFleetManifestsPointHealthChecksAtTheOrigin(t *testing.T) {
	const origin = "http://127.0.0.1:1234/"
	objs, err := FleetManifests(origin)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Kind, Name, URL string }
	var got []row
	for _, o := range objs {
		url, _, _ := unstructured.NestedString(o.Object, "spec", "healthCheck", "url")
		if o.GetKind() == "ProxyPool" {
			url, _, _ = unstructured.NestedString(o.Object, "spec", "template", "spec", "healthCheck", "url")
		}
		got = append(got, row{o.GetKind(), o.GetName(), url})
	}
	// Every Proxy of the sample fleet and the pool's template, and nothing
	// else, get the origin.
	want := []row{
		{"Secret", "proxy-cloud-init", ""},
		{"Proxy", "vm-us", origin},
		{"Proxy", "vm-eu", origin},
		{"ProxyPool", "burst", origin},
		{"Proxy", "proxy-a", origin},
		{"Proxy", "proxy-b", origin},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("fleet (-want +got):\n%s", d)
	}
	// The override keeps the rest of the health check (proxy-b sets some).
	for _, o := range objs {
		if o.GetName() != "proxy-b" {
			continue
		}
		// JSON numbers decode as float64.
		interval, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "healthCheck", "intervalSeconds")
		if interval != float64(10) {
			t.Errorf("proxy-b healthCheck.intervalSeconds = %v (%T) after the override, want the manifest's 10", interval, interval)
		}
	}
}

func TestProcessesUsingFindsChildrenNamingTheDir(t *testing.T) {
	dir := t.TempDir()
	other := t.TempDir()
	// sleep ignores its extra argument's meaning but shows it in its cmdline.
	cmd := exec.Command("sh", "-c", "sleep 30", "sh", filepath.Join(dir, "conf"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	found := func(dirs ...string) bool {
		for _, p := range ProcessesUsing(dirs...) {
			if strings.HasPrefix(p, strconv.Itoa(pid)+":") {
				return true
			}
		}
		return false
	}
	// exec returns to the parent (vfork) before the kernel has set the
	// child's argument area, so /proc/<pid>/cmdline can read empty for an
	// instant on a loaded machine: wait for it, briefly.
	for deadline := time.Now().Add(5 * time.Second); !found(other, dir); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ProcessesUsing(%s) misses pid %d whose arguments name it", dir, pid)
		}
	}
	if found(other) {
		t.Errorf("ProcessesUsing(%s) reports pid %d, which names another directory", other, pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for found(dir) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still reported after it was killed and reaped", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
