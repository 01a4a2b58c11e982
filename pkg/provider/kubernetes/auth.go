package kubernetes

import (
	"context"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

const (
	// AuthDir is where a pod's proxy auth Secret is mounted: the helper's
	// configuration (AuthConfigFile) and the squid.conf that runs it
	// (AuthSquidConfFile).
	AuthDir = "/etc/proxy-operator/auth"
	// AuthConfigFile is the helper configuration's file and Secret key.
	AuthConfigFile = "config.json"
	// AuthSquidConfFile is the squid.conf's file and Secret key.
	AuthSquidConfFile = "squid.conf"
	// authSecretSuffix ends the name of a pod's proxy auth Secret.
	authSecretSuffix = "-proxy-auth"
	// HelperDir holds the helper, copied there by the init container from
	// the helper image (an emptyDir: the root filesystem is read-only).
	HelperDir = "/opt/proxy-operator/bin"
	// HelperBinary is the helper's file name, in HelperDir and at the root
	// of the helper image.
	HelperBinary = "proxy-auth-helper"
	// DefaultHelperImage has the helper at /proxy-auth-helper: the
	// operator's own image.
	DefaultHelperImage = "proxy-operator:dev"

	authVolume   = "proxy-auth"
	helperVolume = "proxy-auth-helper"
)

// AuthSecretName is the name of the Secret holding pod podName's proxy auth
// configuration (in the pod's namespace).
func AuthSecretName(podName string) string { return podName + authSecretSuffix }

// squidConf is the squid.conf of a pod that checks credentials: the auth
// stanza first, then what the stock configuration would do for a forward
// proxy, with every file in a writable emptyDir.
func squidConf(e proxyauth.Egress) string {
	return "http_port " + fmt.Sprint(Port) + "\n" +
		proxyauth.SquidAuthConfig(path.Join(HelperDir, HelperBinary), path.Join(AuthDir, AuthConfigFile), proxyauth.DefaultRelayAddr, e) +
		strings.Join([]string{
			"cache deny all",
			"access_log stdio:/dev/stdout",
			"cache_log stdio:/dev/stderr",
			"cache_store_log none",
			"pid_filename /run/squid.pid",
			"coredump_dir /var/spool/squid",
			"pinger_enable off",
		}, "\n") + "\n"
}

// authSecret is the Secret of req's pod in namespace ns.
func authSecret(req provider.CreateRequest, ns string, e proxyauth.Egress) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      AuthSecretName(req.Name),
			Namespace: ns,
			Labels:    podLabels(req),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			AuthConfigFile:    req.ProxyAuth,
			AuthSquidConfFile: []byte(squidConf(e)),
		},
	}
}

// addAuth makes pod check credentials: the Secret volume, the helper
// copied in by an init container, Squid started on the Secret's squid.conf
// behind the helper's relay.
func addAuth(pod *corev1.Pod, helperImage string) {
	spec := &pod.Spec
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: authVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: AuthSecretName(pod.Name), DefaultMode: ptr.To[int32](0o440),
		}}},
		corev1.Volume{Name: helperVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	)
	squid := &spec.Containers[0]
	// Squid behind the helper's relay, which ends a lease's tunnels when
	// the lease ends; the relay listens before Squid starts.
	squid.Command = proxyauth.RelayCommand(path.Join(HelperDir, HelperBinary), path.Join(AuthDir, AuthConfigFile), proxyauth.DefaultRelayAddr,
		"/usr/sbin/squid", "-NYC", "-f", path.Join(AuthDir, AuthSquidConfFile))
	squid.VolumeMounts = append(squid.VolumeMounts,
		corev1.VolumeMount{Name: authVolume, MountPath: AuthDir, ReadOnly: true},
		corev1.VolumeMount{Name: helperVolume, MountPath: HelperDir, ReadOnly: true},
	)
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:            "install-" + HelperBinary,
		Image:           helperImage,
		Command:         []string{"/" + HelperBinary, "--install-to", HelperDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: helperVolume, MountPath: HelperDir}},
		SecurityContext: squid.SecurityContext.DeepCopy(),
		Resources:       *squid.Resources.DeepCopy(),
	})
}

// ensureAuthSecret creates (or, left by an earlier attempt, updates) the
// Secret of req's pod.
func (p *Provider) ensureAuthSecret(ctx context.Context, req provider.CreateRequest, ns string) error {
	s := authSecret(req, ns, p.opts.Egress)
	err := p.c.Create(ctx, s)
	if apierrors.IsAlreadyExists(err) {
		err = p.c.Update(ctx, s)
	}
	if err != nil {
		return classify(provider.OpCreate, fmt.Errorf("writing Secret %s/%s: %w", ns, s.Name, err))
	}
	return nil
}

// deleteAuthSecret deletes the Secret of pod ns/name, if any.
func (p *Provider) deleteAuthSecret(ctx context.Context, ns, name string) error {
	s := &corev1.Secret{}
	s.Namespace, s.Name = ns, AuthSecretName(name)
	if err := p.c.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return classify(provider.OpDelete, fmt.Errorf("deleting Secret %s/%s: %w", ns, s.Name, err))
	}
	return nil
}
