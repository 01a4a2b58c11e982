package kubernetes

import (
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
// with the given image, node and env; the tests vary only those.
func wantPod(namespace, image, node string, env []corev1.EnvVar) *corev1.Pod {
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
			Containers: []corev1.Container{{
				Name:  "squid",
				Image: image,
				Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 3128, Protocol: corev1.ProtocolTCP}},
				Env:   env,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("50m"),
						corev1.ResourceMemory: resource.MustParse("64Mi"),
					},
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
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
	tests := []struct {
		name string
		req  provider.CreateRequest
		opts Options
		want *corev1.Pod
	}{
		{
			name: "defaults: proxy namespace, pinned image, no node, no env",
			req:  base,
			want: wantPod("team", DefaultImage, "", nil),
		},
		{
			name: "provider options override namespace, image and node",
			req:  base,
			opts: Options{Namespace: "proxies", Image: "example.org/squid:1", NodeName: "node-a"},
			want: wantPod("proxies", "example.org/squid:1", "node-a", nil),
		},
		{
			name: "cloud-init data goes into the container environment",
			req:  with(func(r *provider.CreateRequest) { r.CloudInit = "#cloud-config\nruncmd: [true]\n" }),
			want: wantPod("team", DefaultImage, "", []corev1.EnvVar{{Name: UserDataEnv, Value: "#cloud-config\nruncmd: [true]\n"}}),
		},
		{
			name: "spec.kubernetes overrides the provider options",
			req: with(func(r *provider.CreateRequest) {
				r.Proxy = &crawlv1alpha1.ProxySpec{Kubernetes: &crawlv1alpha1.KubernetesProviderSpec{Image: "mine:2", NodeName: "node-b"}}
			}),
			opts: Options{Image: "example.org/squid:1", NodeName: "node-a"},
			want: wantPod("team", "mine:2", "node-b", nil),
		},
		{
			name: "empty spec.kubernetes fields keep the provider options",
			req: with(func(r *provider.CreateRequest) {
				r.Proxy = &crawlv1alpha1.ProxySpec{Kubernetes: &crawlv1alpha1.KubernetesProviderSpec{}}
			}),
			opts: Options{NodeName: "node-a"},
			want: wantPod("team", DefaultImage, "node-a", nil),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := buildPod(tc.req, tc.opts)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("buildPod (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildPodIsPure(t *testing.T) {
	spec := &crawlv1alpha1.ProxySpec{Kubernetes: &crawlv1alpha1.KubernetesProviderSpec{Image: "mine:2"}}
	req := provider.CreateRequest{Name: "proxy-abc", Tag: "t", OwnerUID: "u", Namespace: "n", Proxy: spec}
	a, b := buildPod(req, Options{}), buildPod(req, Options{})
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
