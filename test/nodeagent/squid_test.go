package nodeagent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/test/logtail"
)

func TestRenderSquidConfig(t *testing.T) {
	got := RenderSquidConfig(SquidConfig{Addr: addr("127.0.0.5"), Dir: "/srv/na/team_proxy-a_1234", VisibleHostname: "proxy-a"})
	want := `# Rendered by the proxy-operator node agent.
http_port 127.0.0.5:3128
http_access allow all
cache deny all
cache_mem 8 MB
shutdown_lifetime 1 seconds
pid_filename /srv/na/team_proxy-a_1234/squid.pid
access_log stdio:/srv/na/team_proxy-a_1234/access.log
cache_log stdio:/srv/na/team_proxy-a_1234/cache.log
cache_store_log none
coredump_dir /srv/na/team_proxy-a_1234
netdb_filename none
pinger_enable off
visible_hostname proxy-a
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RenderSquidConfig (-want +got):\n%s", diff)
	}
}

func TestRenderSquidConfigVariants(t *testing.T) {
	tests := []struct {
		name     string
		cfg      SquidConfig
		wantLine string
	}{
		{"explicit port", SquidConfig{Addr: addr("127.0.0.9"), Port: 8080, Dir: "/d"}, "http_port 127.0.0.9:8080"},
		{"default hostname", SquidConfig{Addr: addr("127.0.0.9"), Dir: "/d"}, "visible_hostname proxy-operator-squid"},
		{"paths follow dir", SquidConfig{Addr: addr("127.0.0.9"), Dir: "/other"}, "pid_filename /other/squid.pid"},
		{"credentials checked", SquidConfig{Addr: addr("127.0.0.9"), Dir: "/d", AuthConfig: []byte("{}"), AuthHelper: "/d/proxy-auth-helper"},
			"auth_param basic program /d/proxy-auth-helper --config /d/proxy-auth.json"},
		{"denied without", SquidConfig{Addr: addr("127.0.0.9"), Dir: "/d", AuthConfig: []byte("{}"), AuthHelper: "/d/proxy-auth-helper"},
			"http_access deny !proxy_operator_lease"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lines := strings.Split(RenderSquidConfig(tc.cfg), "\n")
			found := false
			for _, l := range lines {
				found = found || l == tc.wantLine
			}
			if !found {
				t.Errorf("config lacks %q:\n%s", tc.wantLine, strings.Join(lines, "\n"))
			}
		})
	}
}

func TestSquidConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     SquidConfig
		wantErr bool
	}{
		{"valid", SquidConfig{Addr: addr("127.0.0.2"), Dir: "/tmp/x"}, false},
		{"no address", SquidConfig{Dir: "/tmp/x"}, true},
		{"relative dir", SquidConfig{Addr: addr("127.0.0.2"), Dir: "x"}, true},
		{"dir with a space", SquidConfig{Addr: addr("127.0.0.2"), Dir: "/tmp/a b"}, true},
		{"port out of range", SquidConfig{Addr: addr("127.0.0.2"), Dir: "/tmp/x", Port: 70000}, true},
		{"hostname with whitespace", SquidConfig{Addr: addr("127.0.0.2"), Dir: "/tmp/x", VisibleHostname: "a b"}, true},
	}
	for _, tc := range tests {
		if err := tc.cfg.Validate(); (err != nil) != tc.wantErr {
			t.Errorf("%s: Validate() = %v, wantErr %v", tc.name, err, tc.wantErr)
		}
	}
}

// squidDir returns a fresh directory squid's user can write, removed at the
// end of the test. t.TempDir's parents are 0700, closed to that user.
func squidDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nodeagent-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// testSquidPath finds squid or fails: the node agent is useless without it.
func testSquidPath(t testing.TB) string {
	t.Helper()
	p, err := LookSquid("")
	if err != nil {
		t.Fatalf("%v (the node agent tests need Debian's squid)", err)
	}
	return p
}

// freeTestAddr returns an address of the range reserved for this package's
// unit tests on which nothing listens.
func freeTestAddr(t testing.TB) SquidConfig {
	t.Helper()
	pool, err := NewAddrPool(addr("127.0.3.2"), addr("127.0.3.40"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := pool.Allocate(func(a netip.Addr) bool { return !PortFree(a.String() + ":3128") })
	if err != nil {
		t.Fatal(err)
	}
	return SquidConfig{Addr: a, Dir: squidDir(t), VisibleHostname: "unit"}
}

// getThrough fetches target through the proxy at proxyAddr.
func getThrough(proxyAddr, target string) (int, string, error) {
	proxyURL := &url.URL{Scheme: "http", Host: proxyAddr}
	client := &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true},
		Timeout:   10 * time.Second,
	}
	resp, err := client.Get(target)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestSquidForwardsAndStops(t *testing.T) {
	squidPath := testSquidPath(t)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello via %s", r.Header.Get("Via"))
	}))
	defer backend.Close()

	cfg := freeTestAddr(t)
	sq, err := StartSquid(squidPath, cfg, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		t.Fatalf("StartSquid: %v", err)
	}
	defer func() { _ = sq.Stop(5 * time.Second) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := WaitListening(ctx, cfg.ListenAddr(), sq.Done()); err != nil {
		t.Fatalf("WaitListening: %v\n%s", err, logtail.File(cfg.CacheLogPath(), 20))
	}
	if PortFree(cfg.ListenAddr()) {
		t.Errorf("PortFree(%s) = true while squid listens there", cfg.ListenAddr())
	}
	code, body, err := getThrough(cfg.ListenAddr(), backend.URL)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "squid") {
		t.Errorf("GET through squid = (%d, %q, %v), want 200 with squid in the Via header", code, body, err)
	}

	pid := sq.PID()
	start := time.Now()
	if err := sq.Stop(5 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("squid stopped in %v", time.Since(start))
	if processAlive(pid) {
		t.Errorf("squid %d still alive after Stop", pid)
	}
	if !sq.Stopping() {
		t.Error("Stopping() = false after Stop")
	}
	if !PortFree(cfg.ListenAddr()) {
		t.Errorf("%s still bound after Stop", cfg.ListenAddr())
	}
}

func TestSquidCrashIsNotAStop(t *testing.T) {
	squidPath := testSquidPath(t)
	cfg := freeTestAddr(t)
	sq, err := StartSquid(squidPath, cfg, nil)
	if err != nil {
		t.Fatalf("StartSquid: %v", err)
	}
	defer func() { _ = sq.Stop(time.Second) }()
	if sq.ExitCode() != -1 || sq.Exited() {
		t.Errorf("running squid: ExitCode %d, Exited %v; want -1, false", sq.ExitCode(), sq.Exited())
	}
	if err := sq.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sq.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("squid did not exit after SIGKILL")
	}
	if sq.Stopping() {
		t.Error("Stopping() = true after a kill nobody asked for")
	}
	if got := sq.ExitCode(); got != 128+int(syscall.SIGKILL) {
		t.Errorf("ExitCode() = %d, want %d", got, 128+int(syscall.SIGKILL))
	}
	if sq.ExitError() == nil {
		t.Error("ExitError() = nil after SIGKILL")
	}
}

func TestSquidFailsOnTakenAddress(t *testing.T) {
	squidPath := testSquidPath(t)
	cfg := freeTestAddr(t)
	first, err := StartSquid(squidPath, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Stop(5 * time.Second) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := WaitListening(ctx, cfg.ListenAddr(), first.Done()); err != nil {
		t.Fatal(err)
	}
	second := cfg
	second.Dir = squidDir(t)
	sq, err := StartSquid(squidPath, second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sq.Stop(time.Second) }()
	select {
	case <-sq.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a second squid on a taken address kept running")
	}
	if sq.ExitError() == nil {
		t.Errorf("second squid exited cleanly; cache.log:\n%s", logtail.File(second.CacheLogPath(), 10))
	}
}

// helperEnv makes the test binary act as a squid parent (see
// TestHelperSquidParent) instead of running tests.
const helperEnv = "NODEAGENT_TEST_SQUID_PARENT"

// TestHelperSquidParent is not a test: run by TestSquidDiesWithItsParent in a
// child process, it starts squid in the directory and on the address given in
// the environment, prints squid's pid and waits to be killed.
func TestHelperSquidParent(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process only")
	}
	a, dir, _ := strings.Cut(spec, ",")
	sq, err := StartSquid(testSquidPath(t), SquidConfig{Addr: netip.MustParseAddr(a), Dir: dir}, nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Printf("pid=%d\n", sq.PID())
	time.Sleep(time.Minute)
	os.Exit(0)
}

func TestSquidDiesWithItsParent(t *testing.T) {
	testSquidPath(t)
	cfg := freeTestAddr(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSquidParent$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+cfg.Addr.String()+","+cfg.Dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := 0
	sc := bufio.NewScanner(stdout)
	for pid == 0 && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "pid="); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		t.Fatal("helper did not report squid's pid")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := WaitListening(ctx, cfg.ListenAddr(), nil); err != nil {
		t.Fatalf("squid of the helper: %v", err)
	}
	if !processAlive(pid) {
		t.Fatalf("squid %d not alive before its parent dies (negative control)", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if processAlive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("squid %d outlived its killed parent", pid)
	}
}
