package kubernetes

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// wantPod is the pod of a request for "proxy-abc" owned by uid-1 in ns "team"
// with the given image, node, env and user data Secret ("": none); the tests
// vary only those.
func wantPod(namespace, image, node string, env []corev1.EnvVar, userDataSecret string) *corev1.Pod {
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	if userDataSecret != "" {
		volumes = append(volumes, corev1.Volume{Name: "cloud-init", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: userDataSecret, Items: []corev1.KeyToPath{{Key: "userData", Path: "user-data"}}, DefaultMode: ptr.To[int32](0o440)}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "cloud-init", MountPath: "/etc/proxy-operator/cloud-init", ReadOnly: true})
	}
	for i, dir := range []string{"/var/log/squid", "/var/spool/squid", "/var/cache/squid", "/run", "/tmp"} {
		name := fmt.Sprintf("writable-%d", i)
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: dir})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "proxy-abc",
			Namespace: namespace,
			Labels: map[string]string{
				"crawl.example.com/proxy-uid":  "uid-1",
				"crawl.example.com/managed-by": "proxy-operator",
			},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](13), RunAsGroup: ptr.To[int64](13), FSGroup: ptr.To[int64](13),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: volumes,
			Containers: []corev1.Container{{
				Name:         "squid",
				Image:        image,
				Command:      []string{"/usr/sbin/squid", "-NYC", "-f", "/etc/squid/squid.conf"},
				Ports:        []corev1.ContainerPort{{Name: "proxy", ContainerPort: 3128, Protocol: corev1.ProtocolTCP}},
				Env:          env,
				VolumeMounts: mounts,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("50m"),
						corev1.ResourceMemory: resource.MustParse("64Mi"),
					},
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("proxy")}},
					PeriodSeconds: 5,
				},
			}},
		},
	}
}

func TestBuildPod(t *testing.T) {
	base := provider.CreateRequest{Name: "proxy-abc", Tag: provider.DefaultTag, OwnerUID: "uid-1", Namespace: "team"}
	with := func(mutate func(r *provider.CreateRequest)) provider.CreateRequest {
		r := base
		mutate(&r)
		return r
	}
	asks := func(image, node string) provider.CreateRequest {
		return with(func(r *provider.CreateRequest) {
			r.Proxy = &crawlv1alpha1.ProxySpec{Kubernetes: &crawlv1alpha1.KubernetesProviderSpec{Image: image, NodeName: node}}
		})
	}
	fromSecret := with(func(r *provider.CreateRequest) {
		r.CloudInit = "#cloud-config\npassword: hunter2\n"
		r.CloudInitSecret = &provider.SecretKeyRef{Name: "boot", Key: "userData"}
	})
	tests := []struct {
		name    string
		req     provider.CreateRequest
		opts    Options
		want    *corev1.Pod
		wantErr string // a substring of the error; the pod is then nil
	}{
		{
			name: "defaults: proxy namespace, pinned image, no node, no env",
			req:  base,
			want: wantPod("team", DefaultImage, "", nil, ""),
		},
		{
			name: "provider options set namespace, image and node",
			req:  base,
			opts: Options{Namespace: "proxies", Image: "example.org/squid:1", NodeName: "node-a"},
			want: wantPod("proxies", "example.org/squid:1", "node-a", nil, ""),
		},
		{
			name: "inline cloud-init data goes into the container environment",
			req:  with(func(r *provider.CreateRequest) { r.CloudInit = "#cloud-config\nruncmd: [true]\n" }),
			want: wantPod("team", DefaultImage, "", []corev1.EnvVar{{Name: UserDataEnv, Value: "#cloud-config\nruncmd: [true]\n"}}, ""),
		},
		{
			name: "cloud-init from a Secret is its Secret volume, never the environment",
			req:  fromSecret,
			want: wantPod("team", DefaultImage, "", nil, "boot"),
		},
		{
			name:    "cloud-init from a Secret of another namespace than the pod's is refused",
			req:     fromSecret,
			opts:    Options{Namespace: "proxies"},
			wantErr: "--kubernetes-pod-namespace",
		},
		{
			name: "spec.kubernetes may name the pinned image and the provider's",
			req:  asks(DefaultImage, ""),
			opts: Options{Image: "example.org/squid:1"},
			want: wantPod("team", DefaultImage, "", nil, ""),
		},
		{
			name:    "spec.kubernetes may not name another image",
			req:     asks("mine:2", ""),
			opts:    Options{Image: "example.org/squid:1"},
			wantErr: `spec.kubernetes.image "mine:2" is not allowed: an operator admin must list it in --kubernetes-allowed-images`,
		},
		{
			name: "unless --kubernetes-allowed-images lists it",
			req:  asks("mine:2", ""),
			opts: Options{AllowedImages: []string{"other:1", "mine:2"}},
			want: wantPod("team", "mine:2", "", nil, ""),
		},
		{
			name:    "spec.kubernetes may not name a node",
			req:     asks("", "node-b"),
			opts:    Options{NodeName: "node-a"},
			wantErr: "--kubernetes-allow-proxy-node-name",
		},
		{
			name: "unless --kubernetes-allow-proxy-node-name",
			req:  asks("", "node-b"),
			opts: Options{NodeName: "node-a", AllowProxyNodeName: true},
			want: wantPod("team", DefaultImage, "node-b", nil, ""),
		},
		{
			name: "empty spec.kubernetes fields keep the provider options",
			req:  asks("", ""),
			opts: Options{NodeName: "node-a"},
			want: wantPod("team", DefaultImage, "node-a", nil, ""),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := buildPod(tc.req, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || got != nil {
					t.Fatalf("buildPod = %v, %v; want no pod and an error containing %q", got != nil, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("buildPod (-want +got):\n%s", diff)
			}
			if tc.req.CloudInitSecret != nil && strings.Contains(fmt.Sprint(got), "hunter2") {
				t.Error("the pod carries the Secret's user data")
			}
		})
	}
}

func TestBuildPodIsPure(t *testing.T) {
	spec := &crawlv1alpha1.ProxySpec{Kubernetes: &crawlv1alpha1.KubernetesProviderSpec{Image: "mine:2"}}
	req := provider.CreateRequest{Name: "proxy-abc", Tag: "t", OwnerUID: "u", Namespace: "n", Proxy: spec}
	opts := Options{AllowedImages: []string{"mine:2"}}
	a, errA := buildPod(req, opts)
	b, errB := buildPod(req, opts)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two builds of one request differ (-first +second):\n%s", diff)
	}
	a.Labels["x"] = "y"
	if _, ok := b.Labels["x"]; ok {
		t.Error("builds share their label map")
	}
	if spec.Kubernetes.Image != "mine:2" || spec.Kubernetes.NodeName != "" {
		t.Errorf("buildPod modified the request's spec: %+v", spec.Kubernetes)
	}
}

func TestStateOf(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	tests := []struct {
		name     string
		phase    corev1.PodPhase
		ip       string
		deleting bool
		want     provider.InstanceState
	}{
		{"no phase yet", "", "", false, provider.StateProvisioning},
		{"pending", corev1.PodPending, "", false, provider.StateProvisioning},
		{"running without IP", corev1.PodRunning, "", false, provider.StateProvisioning},
		{"running with IP", corev1.PodRunning, "10.0.0.5", false, provider.StateRunning},
		{"succeeded", corev1.PodSucceeded, "10.0.0.5", false, provider.StateStopped},
		{"failed", corev1.PodFailed, "10.0.0.5", false, provider.StateStopped},
		{"unknown phase", corev1.PodUnknown, "10.0.0.5", false, provider.StateStopped},
		{"phase from the future", "Hibernating", "", false, provider.StateStopped},
		{"running but being deleted", corev1.PodRunning, "10.0.0.5", true, provider.StateTerminated},
		{"pending and being deleted", corev1.PodPending, "", true, provider.StateTerminated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Status: corev1.PodStatus{Phase: tc.phase, PodIP: tc.ip}}
			if tc.deleting {
				pod.DeletionTimestamp = &now
			}
			if got := stateOf(pod); got != tc.want {
				t.Errorf("stateOf(phase %q, ip %q, deleting %v) = %q, want %q", tc.phase, tc.ip, tc.deleting, got, tc.want)
			}
		})
	}
}

func TestInstanceFromPod(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	pod := func(phase corev1.PodPhase, ip string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: "proxy-abc", Namespace: "team", CreationTimestamp: created,
				Labels: map[string]string{provider.TagLabel: "fleet", provider.OwnerUIDLabel: "uid-1"},
			},
			Status: corev1.PodStatus{Phase: phase, PodIP: ip},
		}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want provider.Instance
	}{
		{
			name: "running carries the IP",
			pod:  pod(corev1.PodRunning, "127.0.0.9"),
			want: provider.Instance{ProviderID: "k8s://team/proxy-abc", Name: "proxy-abc", Tag: "fleet", OwnerUID: "uid-1",
				State: provider.StateRunning, IP: "127.0.0.9", CreatedAt: created.Time},
		},
		{
			name: "a failed pod's stale IP is not offered",
			pod:  pod(corev1.PodFailed, "127.0.0.9"),
			want: provider.Instance{ProviderID: "k8s://team/proxy-abc", Name: "proxy-abc", Tag: "fleet", OwnerUID: "uid-1",
				State: provider.StateStopped, CreatedAt: created.Time},
		},
		{
			name: "a pod without our labels has no tag or owner",
			pod: func() *corev1.Pod {
				p := pod(corev1.PodPending, "")
				p.Labels = nil
				return p
			}(),
			want: provider.Instance{ProviderID: "k8s://team/proxy-abc", Name: "proxy-abc", State: provider.StateProvisioning, CreatedAt: created.Time},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, instanceFromPod(tc.pod)); diff != "" {
				t.Errorf("instanceFromPod (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseProviderID(t *testing.T) {
	type parsed struct {
		NS, Name string
		OK       bool
	}
	tests := []struct {
		id   string
		want parsed
	}{
		{"k8s://team/proxy-abc", parsed{"team", "proxy-abc", true}},
		{ProviderID("a", "b"), parsed{"a", "b", true}},
		{"k8s://team/", parsed{}},
		{"k8s:///proxy-abc", parsed{}},
		{"k8s://team", parsed{}},
		{"k8s://team/proxy/abc", parsed{}},
		{"zones/z/instances/proxy-abc", parsed{}},
		{"providertest://never-issued/proxy-abc", parsed{}},
		{"", parsed{}},
	}
	for _, tc := range tests {
		ns, name, ok := ParseProviderID(tc.id)
		if diff := cmp.Diff(tc.want, parsed{ns, name, ok}); diff != "" {
			t.Errorf("ParseProviderID(%q) (-want +got):\n%s", tc.id, diff)
		}
	}
}
