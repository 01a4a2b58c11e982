package kubernetes

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

const (
	// DefaultImage is Canonical's Squid image, pinned: a moving tag would
	// change every proxy's software on the next replacement without a spec
	// edit.
	DefaultImage = "ubuntu/squid:6.6-24.04_beta"
	// ContainerName is the name of the Squid container.
	ContainerName = "squid"
	// PortName names the container port clients connect to.
	PortName = "proxy"
	// Port is Squid's listening port (crawlv1alpha1.ProxyPort).
	Port = 3128
	// UserDataEnv is the environment variable of the Squid container that
	// carries inline cloud-init user data (spec.cloudInit.userData, which
	// is no secret: it is in the Proxy), the container's counterpart of VM
	// user-data metadata. The stock image ignores it; an image that acts on
	// it, or the local node agent (which writes it to a file), reads it.
	UserDataEnv = "CLOUD_INIT_USER_DATA"
	// UserDataDir is where user data from a Secret is mounted (a Secret
	// volume, read-only), as the file UserDataFile: never an environment
	// variable, which anyone who may get pods can read.
	UserDataDir = "/etc/proxy-operator/cloud-init"
	// UserDataFile is the user data's file name in UserDataDir.
	UserDataFile = "user-data"
	// userDataVolume names the Secret volume.
	userDataVolume = "cloud-init"
	// SquidUID is the user Squid runs as: "proxy" of the Ubuntu image (and
	// Debian's package), never root.
	SquidUID = 13
	// ProviderIDPrefix starts every providerID of this provider.
	ProviderIDPrefix = "k8s://"
)

// terminationGracePeriod is short: instances are cattle, and the reconciler
// waits for the old pod to be gone before creating its replacement under the
// same name. Squid's own default shutdown wait is 30s.
const terminationGracePeriod = 5

// Resource requests and limit of the Squid container: the requests fit an
// idle Squid, the limit its measured peak (about 90 MB) with headroom.
var (
	cpuRequest    = resource.MustParse("50m")
	memoryRequest = resource.MustParse("64Mi")
	memoryLimit   = resource.MustParse("256Mi")
)

// ProviderID returns the providerID of the pod namespace/name.
func ProviderID(namespace, name string) string {
	return ProviderIDPrefix + namespace + "/" + name
}

// ParseProviderID splits a providerID into namespace and name; ok is false
// for anything this provider never issues.
func ParseProviderID(id string) (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(id, ProviderIDPrefix)
	if !found {
		return "", "", false
	}
	namespace, name, found = strings.Cut(rest, "/")
	if !found || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", false
	}
	return namespace, name, true
}

// podNamespace is where the pod of req goes: the provider's namespace if
// configured, else the owning Proxy's.
func podNamespace(req provider.CreateRequest, opts Options) string {
	if opts.Namespace != "" {
		return opts.Namespace
	}
	return req.Namespace
}

// squidWritableDirs are the directories Squid writes (logs, spool, pid
// file, temporary files): emptyDirs, because the root filesystem is
// read-only.
var squidWritableDirs = []string{"/var/log/squid", "/var/spool/squid", "/var/cache/squid", "/run", "/tmp"}

// squidCommand starts Squid in the foreground directly: the image's
// entrypoint script writes under /etc as root, which a pod of Pod Security
// "restricted" may not.
var squidCommand = []string{"/usr/sbin/squid", "-NYC", "-f", "/etc/squid/squid.conf"}

// buildPod returns the pod that runs req's instance. A Proxy's
// spec.kubernetes may choose the image and node only as opts allow; the
// error (a request that cannot succeed as it is) names the flag that would.
func buildPod(req provider.CreateRequest, opts Options) (*corev1.Pod, error) {
	var wantImage, wantNode string
	if req.Proxy != nil && req.Proxy.Kubernetes != nil {
		wantImage, wantNode = req.Proxy.Kubernetes.Image, req.Proxy.Kubernetes.NodeName
	}
	image, err := opts.imageFor(wantImage)
	if err != nil {
		return nil, err
	}
	nodeName, err := opts.nodeNameFor(wantNode)
	if err != nil {
		return nil, err
	}
	ns := podNamespace(req, opts)
	var env []corev1.EnvVar
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	switch {
	case req.CloudInitSecret != nil:
		if ns != req.Namespace {
			return nil, fmt.Errorf("cloud-init Secret %s/%s cannot be mounted into a pod of namespace %s (--kubernetes-pod-namespace): put the user data inline or run the pods in the Proxy's namespace",
				req.Namespace, req.CloudInitSecret.Name, ns)
		}
		volumes = append(volumes, corev1.Volume{Name: userDataVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  req.CloudInitSecret.Name,
			Items:       []corev1.KeyToPath{{Key: req.CloudInitSecret.Key, Path: UserDataFile}},
			DefaultMode: ptr.To[int32](0o440),
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: userDataVolume, MountPath: UserDataDir, ReadOnly: true})
	case req.CloudInit != "":
		env = []corev1.EnvVar{{Name: UserDataEnv, Value: req.CloudInit}}
	}
	for i, dir := range squidWritableDirs {
		name := fmt.Sprintf("writable-%d", i)
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: dir})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      req.Name,
			Namespace: ns,
			Labels:    podLabels(req),
		},
		Spec: corev1.PodSpec{
			NodeName: nodeName,
			// Cattle: a dead Squid is replaced by the reconciler (Stopped →
			// delete and recreate), never restarted in place.
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](terminationGracePeriod),
			// Squid needs no API access and no service environment.
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			// Pod Security "restricted".
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](SquidUID),
				RunAsGroup:     ptr.To[int64](SquidUID),
				FSGroup:        ptr.To[int64](SquidUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: volumes,
			Containers: []corev1.Container{{
				Name:         ContainerName,
				Image:        image,
				Command:      squidCommand,
				Ports:        []corev1.ContainerPort{{Name: PortName, ContainerPort: Port, Protocol: corev1.ProtocolTCP}},
				Env:          env,
				VolumeMounts: mounts,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: cpuRequest, corev1.ResourceMemory: memoryRequest},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: memoryLimit},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(PortName)}},
					PeriodSeconds: 5,
				},
			}},
		},
	}
	if len(req.ProxyAuth) > 0 {
		addAuth(pod, opts.helperImage())
	}
	return pod, nil
}

// stateOf maps a pod onto the provider's states.
func stateOf(pod *corev1.Pod) provider.InstanceState {
	if pod.DeletionTimestamp != nil {
		return provider.StateTerminated
	}
	switch pod.Status.Phase {
	case "", corev1.PodPending:
		return provider.StateProvisioning
	case corev1.PodRunning:
		// Running means a container started; without an IP nobody can
		// reach it yet.
		if pod.Status.PodIP == "" {
			return provider.StateProvisioning
		}
		return provider.StateRunning
	case corev1.PodSucceeded, corev1.PodFailed:
		// RestartPolicy Never: the pod still exists but never serves
		// again.
		return provider.StateStopped
	default:
		// PodUnknown and phases yet to come: Stopped makes the reconciler
		// replace the instance, the always-safe answer for cattle.
		return provider.StateStopped
	}
}

// instanceFromPod is the provider's view of pod.
// podLabels are the ownership labels, and the spec hash when given.
func podLabels(req provider.CreateRequest) map[string]string {
	l := map[string]string{
		provider.OwnerUIDLabel: string(req.OwnerUID),
		provider.TagLabel:      req.Tag,
	}
	if req.SpecHash != "" {
		l[provider.SpecHashLabel] = req.SpecHash
	}
	return l
}

func instanceFromPod(pod *corev1.Pod) provider.Instance {
	inst := provider.Instance{
		ProviderID: ProviderID(pod.Namespace, pod.Name),
		Name:       pod.Name,
		Tag:        pod.Labels[provider.TagLabel],
		OwnerUID:   types.UID(pod.Labels[provider.OwnerUIDLabel]),
		SpecHash:   pod.Labels[provider.SpecHashLabel],
		State:      stateOf(pod),
		CreatedAt:  pod.CreationTimestamp.Time,
	}
	if inst.State == provider.StateRunning {
		inst.IP = pod.Status.PodIP
	}
	return inst
}

// describe names a pod for error messages.
func describe(namespace, name string) string { return fmt.Sprintf("pod %s/%s", namespace, name) }
