package gcefake

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// do sends a raw request and decodes the JSON answer generically, so the
// assertions are about the bytes on the wire, not about computepb.
func do(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s %s: answer is not a JSON object: %q", method, url, raw)
	}
	return resp.StatusCode, m
}

const insertBody = `{"name":"proxy-abc","machineType":"zones/us-central1-a/machineTypes/e2-small",
 "disks":[{"boot":true,"initializeParams":{"sourceImage":"projects/debian-cloud/global/images/family/debian-12"}}],
 "networkInterfaces":[{"accessConfigs":[{"name":"External NAT","type":"ONE_TO_ONE_NAT"}]}],
 "labels":{"proxy-operator-tag":"t1","proxy-operator-uid":"u1"}}`

func TestWireFormat(t *testing.T) {
	s := New(Options{PageSize: 1, Zones: []string{"us-central1-a", "europe-west1-b"}})
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	zone := base + "/compute/v1/projects/p1/zones/us-central1-a/instances"

	code, op := do(t, http.MethodPost, zone+"?requestId=0f7b8e4e-1c1a-4b4e-9a4e-3b8d1b9b6a01", insertBody)
	if code != 200 || op["kind"] != "compute#operation" || op["status"] != "RUNNING" || op["operationType"] != "insert" {
		t.Fatalf("insert: %d %v, want 200 and a RUNNING insert Operation", code, op)
	}
	if _, isString := op["id"].(string); !isString {
		t.Errorf("Operation.id is %T, want a string (protojson int64/uint64)", op["id"])
	}
	// A repeated requestId is the same operation, not a conflict.
	if code, again := do(t, http.MethodPost, zone+"?requestId=0f7b8e4e-1c1a-4b4e-9a4e-3b8d1b9b6a01", insertBody); code != 200 || again["name"] != op["name"] {
		t.Errorf("repeated requestId: %d %v, want 200 and operation %v", code, again["name"], op["name"])
	}
	// Another insert of the name: 409 alreadyExists in the googleapi body.
	code, e := do(t, http.MethodPost, zone, insertBody)
	errObj, _ := e["error"].(map[string]any)
	errs, _ := errObj["errors"].([]any)
	if code != 409 || errObj["code"] != float64(409) || len(errs) != 1 || errs[0].(map[string]any)["reason"] != "alreadyExists" {
		t.Errorf("duplicate insert: %d %v, want 409 with errors[0].reason alreadyExists", code, e)
	}

	// Boot: PROVISIONING → STAGING → RUNNING across polls, natIP only then.
	var statuses []string
	var nat any
	for range 4 {
		_, inst := do(t, http.MethodGet, zone+"/proxy-abc", "")
		statuses = append(statuses, inst["status"].(string))
		nis := inst["networkInterfaces"].([]any)
		ac := nis[0].(map[string]any)["accessConfigs"].([]any)[0].(map[string]any)
		nat = ac["natIP"]
		if inst["status"] != "RUNNING" && nat != nil {
			t.Errorf("natIP %v while %s", nat, inst["status"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Join(statuses[:3], ",") != "STAGING,RUNNING,RUNNING" && strings.Join(statuses[:3], ",") != "STAGING,STAGING,RUNNING" {
		t.Errorf("statuses over polls %v, want STAGING then RUNNING", statuses)
	}
	if nat == nil {
		t.Error("RUNNING instance without natIP")
	}

	// Aggregated list: items keyed zones/<z>, empty scopes warn, pages.
	if _, err := http.Post(base+"/compute/v1/projects/p1/zones/us-central1-a/instances", "application/json",
		strings.NewReader(strings.Replace(insertBody, "proxy-abc", "proxy-def", 1))); err != nil {
		t.Fatal(err)
	}
	list := base + "/compute/v1/projects/p1/aggregated/instances?returnPartialSuccess=true&filter=" + `labels.proxy-operator-tag+%3D+%22t1%22`
	code, page := do(t, http.MethodGet, list, "")
	items, _ := page["items"].(map[string]any)
	if code != 200 || page["nextPageToken"] == nil {
		t.Fatalf("list page 1: %d %v, want 200 with a nextPageToken (page size 1)", code, page)
	}
	eu, _ := items["zones/europe-west1-b"].(map[string]any)
	if w, _ := eu["warning"].(map[string]any); w == nil || w["code"] != "NO_RESULTS_ON_PAGE" {
		t.Errorf("empty zone scope %v, want a NO_RESULTS_ON_PAGE warning", eu)
	}
	_, page2 := do(t, http.MethodGet, list+"&pageToken="+page["nextPageToken"].(string), "")
	if page2["nextPageToken"] != nil {
		t.Errorf("page 2 has a nextPageToken: %v", page2)
	}
	// A filter on another tag finds nothing; an unknown filter syntax is 400.
	if _, none := do(t, http.MethodGet, base+"/compute/v1/projects/p1/aggregated/instances?filter=labels.proxy-operator-tag%3Dother", ""); none["items"].(map[string]any)["zones/us-central1-a"].(map[string]any)["instances"] != nil {
		t.Errorf("filter on another tag listed instances: %v", none)
	}
	if code, _ := do(t, http.MethodGet, base+"/compute/v1/projects/p1/aggregated/instances?filter=name+%3E+x", ""); code != 400 {
		t.Errorf("unsupported filter: %d, want 400", code)
	}
	// Unreachable zones are named and their instances left out.
	s.SetUnreachable("", "us-central1-a", true)
	_, partial := do(t, http.MethodGet, list, "")
	if u, _ := partial["unreachables"].([]any); len(u) != 1 || u[0] != "zones/us-central1-a" {
		t.Errorf("unreachables %v, want [zones/us-central1-a]", partial["unreachables"])
	}
	if _, has := partial["items"].(map[string]any)["zones/us-central1-a"]; has {
		t.Errorf("an unreachable zone has items: %v", partial["items"])
	}
	s.SetUnreachable("", "us-central1-a", false)

	// Delete answers an Operation; the instance is STOPPING, then 404.
	if code, op := do(t, http.MethodDelete, zone+"/proxy-abc", ""); code != 200 || op["operationType"] != "delete" {
		t.Errorf("delete: %d %v", code, op)
	}
	code, gone := do(t, http.MethodGet, zone+"/proxy-abc", "")
	if code != 404 {
		t.Errorf("get after delete (no backend to stop): %d %v, want 404", code, gone)
	}
	if code, _ := do(t, http.MethodDelete, zone+"/proxy-abc", ""); code != 404 {
		t.Errorf("delete of a deleted instance: %d, want 404", code)
	}
}

func TestFaults(t *testing.T) {
	s := New(Options{})
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	zone := base + "/compute/v1/projects/p1/zones/us-central1-a/instances"
	s.Inject(Fault{Op: OpInsert, Code: 403, Reason: "quotaExceeded", Times: 1})
	code, e := do(t, http.MethodPost, zone, insertBody)
	if code != 403 || !strings.Contains(e["error"].(map[string]any)["message"].(string), "Quota 'CPUS' exceeded") {
		t.Errorf("injected quota: %d %v", code, e)
	}
	// Times: 1 — the next insert goes through.
	if code, _ := do(t, http.MethodPost, zone, insertBody); code != 200 {
		t.Errorf("insert after a one-time fault: %d", code)
	}
	// Accepted, then vanished: one poll shows it, the next is 404.
	s.Inject(Fault{Op: OpInsert, Vanish: true, Times: 1})
	body := strings.Replace(insertBody, "proxy-abc", "proxy-vanish", 1)
	if code, _ := do(t, http.MethodPost, zone, body); code != 200 {
		t.Fatalf("vanishing insert: %d, want 200 (accepted)", code)
	}
	first, _ := do(t, http.MethodGet, zone+"/proxy-vanish", "")
	second, _ := do(t, http.MethodGet, zone+"/proxy-vanish", "")
	if first != 200 || second != 404 {
		t.Errorf("vanishing instance polls: %d then %d, want 200 then 404", first, second)
	}
	// Slowness holds the answer back.
	s.Inject(Fault{Op: OpGet, Delay: 200 * time.Millisecond, Times: 1})
	began := time.Now()
	do(t, http.MethodGet, zone+"/proxy-abc", "")
	if took := time.Since(began); took < 200*time.Millisecond {
		t.Errorf("delayed get took %s", took)
	}
	// Random failures are reproducible from their seed.
	s.RandomFailures(OpGet, 0.5, 503, "backendError", 42)
	var codes []int
	for range 20 {
		c, _ := do(t, http.MethodGet, zone+"/proxy-abc", "")
		codes = append(codes, c)
	}
	failed := 0
	for _, c := range codes {
		if c == 503 {
			failed++
		}
	}
	if failed < 3 || failed > 17 {
		t.Errorf("%d of 20 gets failed at a 50%% rate", failed)
	}
	if n := s.CallCounts()[OpInsert]; n != 3 {
		t.Errorf("recorded %d inserts, want 3", n)
	}
}

// TestPlant: a planted instance is RUNNING at once, with its natIP, labels and
// the creation time given, and listed like any other.
func TestPlant(t *testing.T) {
	s := New(Options{})
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := s.Plant("p1", "us-east1-b", "orphan", map[string]string{"proxy-operator-tag": "t1"}, created); err != nil {
		t.Fatal(err)
	}
	if err := s.Plant("p1", "us-east1-b", "orphan", nil, created); err == nil {
		t.Error("planting an existing name succeeded")
	}
	code, inst := do(t, http.MethodGet, base+"/compute/v1/projects/p1/zones/us-east1-b/instances/orphan", "")
	nat := inst["networkInterfaces"].([]any)[0].(map[string]any)["accessConfigs"].([]any)[0].(map[string]any)["natIP"]
	if code != 200 || inst["status"] != "RUNNING" || nat == nil {
		t.Errorf("planted instance: %d %v, want RUNNING with a natIP", code, inst)
	}
	if ts, _ := time.Parse(time.RFC3339, inst["creationTimestamp"].(string)); !ts.Equal(created) {
		t.Errorf("creationTimestamp %v, want %s", inst["creationTimestamp"], created)
	}
	_, list := do(t, http.MethodGet, base+"/compute/v1/projects/p1/aggregated/instances?filter=labels.proxy-operator-tag%3Dt1", "")
	if got := list["items"].(map[string]any)["zones/us-east1-b"].(map[string]any)["instances"]; got == nil {
		t.Errorf("planted instance not listed: %v", list)
	}
}

// gatedBackend starts an instance only when the test releases it, and has
// nothing to stop (as NoBackend).
type gatedBackend struct{ release chan struct{} }

func (b gatedBackend) Start(context.Context, string, map[string]string) (string, func() error, error) {
	<-b.release
	return "127.0.2.9:3128", nil, nil
}

// An instance deleted while its backend is still starting is gone once the
// start finishes (it used to stay STOPPING forever with a backend that has
// nothing to stop).
func TestDeleteWhileBooting(t *testing.T) {
	b := gatedBackend{release: make(chan struct{})}
	s := New(Options{Backend: b})
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	zone := base + "/compute/v1/projects/p1/zones/us-central1-a/instances"
	if code, _ := do(t, http.MethodPost, zone, insertBody); code != 200 {
		t.Fatalf("insert: %d", code)
	}
	if code, _ := do(t, http.MethodDelete, zone+"/proxy-abc", ""); code != 200 {
		t.Fatalf("delete while booting: %d", code)
	}
	close(b.release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := do(t, http.MethodGet, zone+"/proxy-abc", "")
		if code == http.StatusNotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("an instance deleted while booting still answers %d after its start finished", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
