package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files of the state directory that the teardown reads.
const (
	sysctlsFile = "sysctls"
	createdFile = "created"
	logsDir     = "logs"
)

// globalSysctls are the machine-wide settings the kubelet writes at start
// (pkg/kubelet/cm setupKernelTunables) and kube-proxy may: saved before the
// node starts, restored at teardown. Everything else they change is per
// network namespace and dies with the node's.
var globalSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.netfilter.nf_conntrack_max",
}

// cgroupRoot is where the v1 hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// supervise brings the node up and holds it until SIGINT or SIGTERM, then
// tears it down. It runs on the machine's side: the network namespace, the
// veth pair, the cgroups and the sysctls are its; the node's daemons run in
// a child it starts inside the namespaces.
func supervise(c config, args []string) error {
	if err := teardown(c); err != nil {
		return fmt.Errorf("removing what an earlier run left: %w", err)
	}
	stop := make(chan os.Signal, 2)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	err := bringUp(c, args, stop)
	if terr := teardown(c); terr != nil {
		err = errors.Join(err, fmt.Errorf("teardown: %w", terr))
	}
	return err
}

func bringUp(c config, args []string, stop <-chan os.Signal) error {
	if err := os.MkdirAll(filepath.Join(c.Dir, logsDir), 0o755); err != nil {
		return err
	}
	if err := saveSysctls(c); err != nil {
		return err
	}
	if err := makeCgroups(c); err != nil {
		return err
	}
	if err := makeNetwork(c); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// nsenter, not `ip netns exec`: the latter remounts /sys and hides
	// the cgroup hierarchies from the kubelet.
	cmd := exec.Command("nsenter", append([]string{"--net=" + netnsPath(c), "--",
		"unshare", "--mount", "--propagation", "private", "--", self, "-node"}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// If this supervisor is killed, the node goes too; the next start's
	// teardown removes what outlives it (shims, containers).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the node: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case sig := <-stop:
		fmt.Printf("cluster: %v: tearing down\n", sig)
		return nil
	case err := <-exited:
		return fmt.Errorf("the node exited: %v (logs: %s)", err, filepath.Join(c.Dir, logsDir))
	}
}

func netnsPath(c config) string { return "/var/run/netns/" + c.Netns }

// makeNetwork makes the node's network namespace and the veth pair that
// joins it to the machine: a /30, and no route out of the namespace. The
// Service range is routed into a bridge with no port (this kernel has no
// dummy device): a node process's connect to a ClusterIP needs a route
// before kube-proxy's rules rewrite it, and what they leave unrewritten
// goes nowhere.
func makeNetwork(c config) error {
	steps := [][]string{
		{"ip", "netns", "add", c.Netns},
		{"ip", "link", "add", c.Netns, "type", "veth", "peer", "name", "eth0", "netns", c.Netns},
		{"ip", "addr", "add", c.HostAddr.String() + "/30", "dev", c.Netns},
		{"ip", "link", "set", c.Netns, "up"},
		{"ip", "-n", c.Netns, "addr", "add", c.NodeAddr.String() + "/30", "dev", "eth0"},
		{"ip", "-n", c.Netns, "link", "set", "eth0", "up"},
		{"ip", "-n", c.Netns, "link", "set", "lo", "up"},
		{"ip", "-n", c.Netns, "link", "add", "svc0", "type", "bridge"},
		{"ip", "-n", c.Netns, "link", "set", "svc0", "up"},
		{"ip", "-n", c.Netns, "route", "add", c.ServiceCIDR.String(), "dev", "svc0", "src", c.NodeAddr.String()},
		{"ip", "-n", c.Netns, "addr", "add", c.SiteAddr.String() + "/32", "dev", "svc0"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// hierarchies are the mounted cgroup v1 hierarchies (cpu, memory, …).
func hierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil, err
	}
	var hs []string
	for _, e := range entries {
		p := filepath.Join(cgroupRoot, e.Name())
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil && e.Name() != "unified" {
			hs = append(hs, p)
		}
	}
	return hs, nil
}

// makeCgroups makes the node's cgroup in every hierarchy, with its own
// "node" child for the daemons (the kubelet puts pods beside it).
func makeCgroups(c config) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		for _, d := range []string{filepath.Join(h, c.Cgroup), filepath.Join(h, c.Cgroup, "node")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			// A cpuset cgroup takes no task until it has CPUs and memory
			// nodes: its parent's.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
				if err != nil {
					continue
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

// joinCgroups moves this process (and so every child it starts) into the
// node's cgroup in every hierarchy.
func joinCgroups(c config) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, h := range hs {
		if err := os.WriteFile(filepath.Join(h, c.Cgroup, "node", "cgroup.procs"), pid, 0o644); err != nil {
			return fmt.Errorf("joining %s: %w", h, err)
		}
	}
	return nil
}

// cgroupPIDs are the processes anywhere under the node's cgroup.
func cgroupPIDs(c config) ([]int, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, h := range hs {
		root := filepath.Join(h, c.Cgroup)
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return filepath.SkipDir
				}
				return err
			}
			if d.IsDir() {
				data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
				if err != nil {
					return nil
				}
				for _, f := range strings.Fields(string(data)) {
					if n, err := strconv.Atoi(f); err == nil {
						seen[n] = true
					}
				}
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	pids := make([]int, 0, len(seen))
	for p := range seen {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	return pids, nil
}

// killCgroup ends every process of the node: SIGTERM, then SIGKILL after
// grace, and waits (bounded) until none is left.
func killCgroup(c config, grace time.Duration) error {
	signalAll := func(sig syscall.Signal) (int, error) {
		pids, err := cgroupPIDs(c)
		for _, p := range pids {
			_ = syscall.Kill(p, sig)
		}
		return len(pids), err
	}
	n, err := signalAll(syscall.SIGTERM)
	if err != nil || n == 0 {
		return err
	}
	for deadline := time.Now().Add(grace); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if pids, _ := cgroupPIDs(c); len(pids) == 0 {
			return nil
		}
	}
	for range 100 {
		if n, err := signalAll(syscall.SIGKILL); err != nil || n == 0 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	pids, _ := cgroupPIDs(c)
	return fmt.Errorf("processes %v of the node survive SIGKILL", pids)
}

// removeCgroups removes the node's cgroups, deepest first, in every
// hierarchy.
func removeCgroups(c config) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, c.Cgroup), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			// A cgroup whose last task just exited may be busy for a moment.
			var err error
			for range 50 {
				if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

// saveSysctls records the global sysctls (once: a saved file is an earlier
// run's that the teardown has not restored yet, and holds the originals).
func saveSysctls(c config) error {
	path := filepath.Join(c.Dir, sysctlsFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	var b strings.Builder
	for _, k := range globalSysctls {
		v, err := os.ReadFile(sysctlPath(k))
		if err != nil {
			continue // not in this kernel
		}
		fmt.Fprintf(&b, "%s=%s\n", k, strings.TrimSpace(string(v)))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func restoreSysctls(c config) error {
	path := filepath.Join(c.Dir, sysctlsFile)
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var errs []error
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		cur, err := os.ReadFile(sysctlPath(k))
		if err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(sysctlPath(k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s=%s: %w", k, v, err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.Remove(path))
	}
	return errors.Join(errs...)
}

// recordCreated notes a path of the machine the node made, for the
// teardown to remove.
func recordCreated(c config, path string) error {
	f, err := os.OpenFile(filepath.Join(c.Dir, createdFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, path)
	return err
}

// removeCreated removes the (empty) directories the node made on the
// machine, last made first.
func removeCreated(c config) error {
	data, err := os.ReadFile(filepath.Join(c.Dir, createdFile))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	lines := strings.Fields(string(data))
	var errs []error
	for i := len(lines) - 1; i >= 0; i-- {
		if err := os.Remove(lines[i]); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mountsUnder are the machine's mount points under dir: the teardown
// never removes files across one.
func mountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var under []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			under = append(under, f[4])
		}
	}
	return under, nil
}

// teardown removes everything a run made, whether it ended cleanly or was
// killed: processes, cgroups, the namespace (and so the veth and every
// address and rule in it), sysctls, directories made on the machine, and
// the state directory (but its logs with -keep-logs).
func teardown(c config) error {
	var errs []error
	if err := killCgroup(c, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(c); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(netnsPath(c)); err == nil {
		if out, err := exec.Command("ip", "netns", "del", c.Netns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", c.Netns, err, out))
		}
	}
	if err := restoreSysctls(c); err != nil {
		errs = append(errs, err)
	}
	if err := removeCreated(c); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	mounts, err := mountsUnder(c.Dir)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		return fmt.Errorf("not removing %s: mounts remain under it: %v", c.Dir, mounts)
	}
	entries, err := os.ReadDir(c.Dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if c.KeepLogs && e.Name() == logsDir {
			continue
		}
		if err := os.RemoveAll(filepath.Join(c.Dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if !c.KeepLogs {
		if err := os.Remove(c.Dir); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if left := leftovers(c); len(left) > 0 {
		return fmt.Errorf("left after the teardown: %s", strings.Join(left, "; "))
	}
	return nil
}

// leftovers lists what a teardown should have removed and did not.
func leftovers(c config) []string {
	var left []string
	if pids, _ := cgroupPIDs(c); len(pids) > 0 {
		left = append(left, fmt.Sprintf("processes %v", pids))
	}
	if hs, err := hierarchies(); err == nil {
		for _, h := range hs {
			if _, err := os.Stat(filepath.Join(h, c.Cgroup)); err == nil {
				left = append(left, "cgroup "+filepath.Join(h, c.Cgroup))
			}
		}
	}
	if _, err := os.Stat(netnsPath(c)); err == nil {
		left = append(left, "network namespace "+c.Netns)
	}
	for _, f := range []string{sysctlsFile, createdFile, KubeconfigFile, ReadyFile} {
		if _, err := os.Stat(filepath.Join(c.Dir, f)); err == nil {
			left = append(left, filepath.Join(c.Dir, f))
		}
	}
	return left
}
