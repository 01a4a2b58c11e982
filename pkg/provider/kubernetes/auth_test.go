package kubernetes

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// A pod whose request carries proxy auth runs Squid on the squid.conf of
// its Secret, with the helper an init container copied from the helper
// image; the Secret holds the helper's configuration and that squid.conf.
func TestBuildPodWithProxyAuth(t *testing.T) {
	req := provider.CreateRequest{Name: "proxy-abc", Tag: provider.DefaultTag, OwnerUID: "uid-1", Namespace: "team",
		ProxyAuth: []byte(`{"namespace":"team","name":"p"}`)}
	pod, err := buildPod(req, Options{HelperImage: "registry.example/proxy-operator:v1"})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := buildPod(provider.CreateRequest{Name: "proxy-abc", Tag: provider.DefaultTag, OwnerUID: "uid-1", Namespace: "team"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Everything else is the pod without auth.
	want := plain.DeepCopy()
	squid := &want.Spec.Containers[0]
	squid.Command = []string{"/opt/proxy-operator/bin/proxy-auth-helper", "relay", "--config", "/etc/proxy-operator/auth/config.json",
		"--listen", "127.0.0.1:3129", "--", "/usr/sbin/squid", "-NYC", "-f", "/etc/proxy-operator/auth/squid.conf"}
	squid.VolumeMounts = append(squid.VolumeMounts,
		corev1.VolumeMount{Name: "proxy-auth", MountPath: "/etc/proxy-operator/auth", ReadOnly: true},
		corev1.VolumeMount{Name: "proxy-auth-helper", MountPath: "/opt/proxy-operator/bin", ReadOnly: true})
	want.Spec.Volumes = append(want.Spec.Volumes,
		corev1.Volume{Name: "proxy-auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "proxy-abc-proxy-auth", DefaultMode: ptr.To[int32](0o440)}}},
		corev1.Volume{Name: "proxy-auth-helper", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	want.Spec.InitContainers = []corev1.Container{{
		Name:            "install-proxy-auth-helper",
		Image:           "registry.example/proxy-operator:v1",
		Command:         []string{"/proxy-auth-helper", "--install-to", "/opt/proxy-operator/bin"},
		VolumeMounts:    []corev1.VolumeMount{{Name: "proxy-auth-helper", MountPath: "/opt/proxy-operator/bin"}},
		SecurityContext: squid.SecurityContext,
		Resources:       squid.Resources,
	}}
	if d := cmp.Diff(want, pod); d != "" {
		t.Errorf("pod (-want +got):\n%s", d)
	}

	s := authSecret(req, "team", proxyauth.Egress{})
	if s.Name != AuthSecretName(pod.Name) || s.Namespace != "team" || string(s.Data[AuthConfigFile]) != string(req.ProxyAuth) {
		t.Errorf("secret %s/%s holds %q, want the request's configuration in %s", s.Namespace, s.Name, s.Data[AuthConfigFile], AuthSecretName(pod.Name))
	}
	if d := cmp.Diff(podLabels(req), s.Labels); d != "" {
		t.Errorf("secret labels (-want +got):\n%s", d)
	}
	conf := string(s.Data[AuthSquidConfFile])
	for _, line := range []string{
		"http_port 3128",
		"auth_param basic program /opt/proxy-operator/bin/proxy-auth-helper --config /etc/proxy-operator/auth/config.json",
		"cache_peer 127.0.0.1 parent 3129 0 no-query no-digest no-netdb-exchange default login=PASSTHRU name=proxy-operator-relay",
		"never_direct allow all",
		"http_access deny !proxy_operator_lease",
		"http_access deny manager",
		"http_access deny proxy_operator_blocked_dst",
		"http_access deny all",
	} {
		if !strings.Contains(conf, line+"\n") {
			t.Errorf("squid.conf lacks %q:\n%s", line, conf)
		}
	}
	if strings.Contains(conf, "http_access allow all") {
		t.Errorf("squid.conf allows all:\n%s", conf)
	}
	if d := cmp.Diff(DefaultHelperImage, (&Options{}).helperImage()); d != "" {
		t.Errorf("default helper image (-want +got):\n%s", d)
	}
}
