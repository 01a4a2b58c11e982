package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

// startTimeout bounds bringing the node up, add-ons Ready included.
const startTimeout = 5 * time.Minute

// runNode is the node's side, inside its network and mount namespaces:
// control plane, containerd, kubelet, kube-proxy, scheduler, add-ons; then
// it holds them until a signal or one of them exits.
func runNode(c config) error {
	if err := joinCgroups(c); err != nil {
		return err
	}
	if err := privateMounts(c); err != nil {
		return err
	}
	for k, v := range map[string]string{"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"} {
		if err := os.WriteFile(sysctlPath(k), []byte(v), 0o644); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("%s in the node's namespace: %w", k, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	n := &node{c: c, logs: filepath.Join(c.Dir, logsDir), exited: make(chan string, 8)}
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	err := n.start(startCtx)
	cancel()
	if err != nil {
		return err
	}
	fmt.Printf("cluster: ready: export KUBECONFIG=%s\n", filepath.Join(c.Dir, KubeconfigFile))
	select {
	case <-ctx.Done():
		return nil
	case <-n.cp.Done():
		return errors.New("etcd or kube-apiserver exited")
	case name := <-n.exited:
		return fmt.Errorf("%s exited (log: %s)", name, filepath.Join(n.logs, name+".log"))
	}
}

// privateMounts gives the node's daemons their own /run, /var/lib/kubelet
// and /var/lib/cni (tmpfs in this mount namespace: they vanish with it).
// The kubelet writes its device-plugin socket under /var/lib/kubelet and
// containerd its CNI results under /var/lib/cni whatever their root.
func privateMounts(c config) error {
	for _, dir := range []string{"/var/lib/kubelet", "/var/lib/cni", "/run"} {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := recordCreated(c, dir); err != nil {
				return err
			}
		}
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mounting a tmpfs at %s: %w", dir, err)
		}
	}
	return os.MkdirAll(runDir, 0o755)
}

type node struct {
	c      config
	logs   string
	cp     *controlplane.ControlPlane
	admin  *rest.Config
	images map[string]string
	// exited gets the name of a daemon that exited.
	exited chan string
}

func (n *node) start(ctx context.Context) error {
	c := n.c
	images, err := imageRefs(c.ImagesDir)
	if err != nil {
		return err
	}
	n.images = images
	fmt.Println("cluster: starting etcd, kube-apiserver, kube-controller-manager")
	cp, err := controlplane.Start(ctx, controlplane.Options{
		BinDir:        c.BinDir,
		Dir:           filepath.Join(c.Dir, "controlplane"),
		KeepDir:       true,
		SkipCRDs:      true,
		ServingHosts:  []string{c.NodeAddr.String(), c.APIServiceIP().String()},
		KubeletClient: true,
		APIServerFlags: map[string]string{
			"bind-address":              "0.0.0.0",
			"advertise-address":         c.NodeAddr.String(),
			"service-cluster-ip-range":  c.ServiceCIDR.String(),
			"disable-admission-plugins": "",
			"enable-admission-plugins":  "NodeRestriction",
			"endpoint-reconciler-type":  "lease",
			"authorization-mode":        "Node,RBAC",
		},
		ControllerManager: true,
		ControllerManagerFlags: map[string]string{
			"controllers":                     "*",
			"use-service-account-credentials": "true",
		},
		StartTimeout: 2 * time.Minute,
	})
	if err != nil {
		return err
	}
	n.cp = cp
	n.admin = n.atNode(cp.RESTConfig())
	if err := n.writeKubeconfig(filepath.Join(c.Dir, KubeconfigFile), n.admin); err != nil {
		return err
	}

	fmt.Println("cluster: starting containerd, loading images")
	if err := writeFile(filepath.Join(c.Dir, "containerd.toml"), containerdConfig(c, images[pauseImageName])); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.Dir, "cni", "10-bridge.conflist"), cniConfig(c)); err != nil {
		return err
	}
	if err := n.daemon("containerd", "containerd", "--config", filepath.Join(c.Dir, "containerd.toml")); err != nil {
		return err
	}
	if err := waitSocket(ctx, containerdSocket); err != nil {
		return fmt.Errorf("containerd: %w (log: %s)", err, filepath.Join(n.logs, "containerd.log"))
	}
	if err := n.loadImages(ctx); err != nil {
		return err
	}

	fmt.Println("cluster: starting kubelet, kube-proxy, kube-scheduler")
	kubeletKubeconfig, err := n.clientKubeconfig("kubelet", "system:node:"+c.NodeName, "system:nodes")
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.Dir, "kubelet.yaml"), kubeletConfig(c, cp.ClientCACertPath)); err != nil {
		return err
	}
	if err := n.daemon("kubelet", filepath.Join(c.BinDir, "kubelet"),
		"--config", filepath.Join(c.Dir, "kubelet.yaml"),
		"--kubeconfig", kubeletKubeconfig,
		"--root-dir", filepath.Join(c.Dir, "kubelet"),
		"--hostname-override", c.NodeName,
		"--node-ip", c.NodeAddr.String(),
		"--v", "1"); err != nil {
		return err
	}
	proxyKubeconfig, err := n.clientKubeconfig("kube-proxy", "system:kube-proxy")
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.Dir, "kube-proxy.yaml"), kubeProxyConfig(c, proxyKubeconfig)); err != nil {
		return err
	}
	if err := n.daemon("kube-proxy", filepath.Join(c.BinDir, "kube-proxy"), "--config", filepath.Join(c.Dir, "kube-proxy.yaml")); err != nil {
		return err
	}
	schedulerKubeconfig, err := n.clientKubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	if err := n.daemon("kube-scheduler", filepath.Join(c.BinDir, "kube-scheduler"),
		"--kubeconfig", schedulerKubeconfig, "--authentication-kubeconfig", schedulerKubeconfig,
		"--authorization-kubeconfig", schedulerKubeconfig, "--leader-elect=false", "--secure-port", "0"); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(n.admin)
	if err != nil {
		return err
	}
	if err := waitNodeReady(ctx, kube, c.NodeName); err != nil {
		return fmt.Errorf("%w (log: %s)", err, filepath.Join(n.logs, "kubelet.log"))
	}

	// kube-network-policies decides on each new connection in user space,
	// through the kernel's nfqueue: without nft's queue expression it
	// cannot enforce anything, and no other agent runs here.
	policy := policyAgent(n.images, nftQueueWorks(ctx))
	if policy != netpolImageName {
		fmt.Printf("cluster: no NetworkPolicy agent: %s\n", strings.TrimPrefix(policy, "none: "))
	}
	fmt.Println("cluster: starting CoreDNS" + map[bool]string{true: " and kube-network-policies"}[policy == netpolImageName])
	if _, err := controlplane.ApplyYAML(ctx, n.admin, []byte(addons(c, images, policy == netpolImageName))); err != nil {
		return fmt.Errorf("applying the add-ons: %w", err)
	}
	want := 1
	if policy == netpolImageName {
		want = 2
	}
	if err := waitPodsReady(ctx, kube, "kube-system", want); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.Dir, NetworkPolicyFile), policy+"\n"); err != nil {
		return err
	}
	var lines []string
	for _, name := range []string{"operator", "squid", "toolbox"} {
		if ref, ok := images[name]; ok {
			lines = append(lines, name+"="+ref)
		}
	}
	if err := writeFile(filepath.Join(c.Dir, ImagesFile), strings.Join(lines, "\n")+"\n"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.Dir, SiteAddressFile), c.SiteAddr.String()+"\n"); err != nil {
		return err
	}
	return writeFile(filepath.Join(c.Dir, ReadyFile), time.Now().UTC().Format(time.RFC3339)+"\n")
}

// atNode points cfg at the node's address, where the machine's shell and
// every pod reach kube-apiserver.
func (n *node) atNode(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	u, err := url.Parse(cfg.Host)
	if err == nil {
		cfg.Host = "https://" + net.JoinHostPort(n.c.NodeAddr.String(), u.Port())
	}
	return cfg
}

// clientKubeconfig writes a kubeconfig for user in groups and returns its
// path.
func (n *node) clientKubeconfig(name, user string, groups ...string) (string, error) {
	cfg, err := n.cp.ClientConfigFor(user, groups...)
	if err != nil {
		return "", err
	}
	path := filepath.Join(n.c.Dir, name+".kubeconfig")
	return path, n.writeKubeconfig(path, n.atNode(cfg))
}

func (n *node) writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy-operator-cluster"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["proxy-operator-cluster"] = &clientcmdapi.Context{Cluster: "proxy-operator-cluster", AuthInfo: "user"}
	kc.CurrentContext = "proxy-operator-cluster"
	return clientcmd.WriteToFile(*kc, path)
}

// daemon starts a node daemon with its log in logs/<name>.log; its exit is
// reported on n.exited.
func (n *node) daemon(name, bin string, args ...string) error {
	log, err := os.OpenFile(filepath.Join(n.logs, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		_ = cmd.Wait()
		log.Close()
		n.exited <- name
	}()
	return nil
}

// loadImages imports every tarball of the images directory into
// containerd's k8s.io namespace, where the kubelet finds them.
func (n *node) loadImages(ctx context.Context) error {
	names := make([]string, 0, len(n.images))
	for name := range n.images {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		tarball := filepath.Join(n.c.ImagesDir, name+".tar")
		out, err := exec.CommandContext(ctx, "ctr", "--address", containerdSocket, "--namespace", "k8s.io",
			"images", "import", tarball).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s: %w: %s", tarball, err, out)
		}
	}
	return nil
}

// imageRefs reads the reference of every <name>.tar in dir (its docker
// manifest's first RepoTag).
func imageRefs(dir string) (map[string]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}
	refs := map[string]string{}
	for _, p := range paths {
		ref, err := tarballRef(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		refs[strings.TrimSuffix(filepath.Base(p), ".tar")] = ref
	}
	// kube-network-policies' image is built only where it can run
	// (hack/tools/install.sh); policyAgent says when it is missing.
	for _, want := range []string{pauseImageName, corednsImageName, "operator", "squid", "toolbox"} {
		if refs[want] == "" {
			return nil, fmt.Errorf("no %s.tar in %s (make cluster-images)", want, dir)
		}
	}
	return refs, nil
}

func tarballRef(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", errors.New("no manifest.json")
		}
		if err != nil {
			return "", err
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			return "", err
		}
		if len(m) != 1 || len(m[0].RepoTags) == 0 {
			return "", errors.New("want one image with a tag")
		}
		return m[0].RepoTags[0], nil
	}
}

// policyAgent is the NetworkPolicy agent the node runs, netpolImageName, or
// "none: " and why not: the kernel cannot queue connections to user space
// (probe, nftQueueWorks's answer), or the agent's image was not built
// (hack/tools/install.sh builds it only where the same rule works).
func policyAgent(images map[string]string, probe error) string {
	switch {
	case probe != nil:
		return "none: " + probe.Error()
	case images[netpolImageName] == "":
		return "none: no " + netpolImageName + ".tar among the images (make cluster-tools builds the agent where nft can queue to user space; run it again)"
	}
	return netpolImageName
}

// nftQueueWorks tries, in a table of its own in the node's namespace, the
// nft rule kube-network-policies needs: a queue to user space.
func nftQueueWorks(ctx context.Context) error {
	const table = "proxy-operator-cluster-probe"
	script := "add table inet " + table + "\n" +
		"add chain inet " + table + " c { type filter hook forward priority 0; }\n" +
		"add rule inet " + table + " c queue num 100 bypass\n"
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	_ = exec.CommandContext(ctx, "nft", "delete", "table", "inet", table).Run()
	if err != nil {
		return fmt.Errorf("this kernel's nftables has no queue to user space (nft_queue): %s", strings.TrimSpace(firstLine(string(out))))
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func writeFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(data), 0o644)
}

func waitSocket(ctx context.Context, path string) error {
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		conn, err := net.Dial("unix", path)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
}

func waitNodeReady(ctx context.Context, kube kubernetes.Interface, name string) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		nd, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, cond := range nd.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = cond.Reason + ": " + cond.Message
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready: %s", name, last)
	}
	return nil
}

// waitPodsReady waits until namespace has at least want pods, all Ready.
func waitPodsReady(ctx context.Context, kube kubernetes.Interface, namespace string, want int) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		var notReady []string
		for _, p := range pods.Items {
			ready := false
			for _, cond := range p.Status.Conditions {
				ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
			}
			if !ready {
				notReady = append(notReady, p.Name+" ("+string(p.Status.Phase)+")")
			}
		}
		last = fmt.Sprintf("%d pods, not Ready: %v", len(pods.Items), notReady)
		return len(pods.Items) >= want && len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %s", namespace, last)
	}
	return nil
}
