package main

import "fmt"

// Names of the add-ons' images in the images directory (file <name>.tar)
// and in .cluster/images.
const (
	pauseImageName   = "pause"
	corednsImageName = "coredns"
	netpolImageName  = "kube-network-policies"
)

// corednsPort is where CoreDNS listens in its pod: above 1024, so it runs
// with no capability; the kube-dns Service maps 53 onto it.
const corednsPort = 1053

// addons are the cluster's DNS (CoreDNS for cluster.local, nothing
// forwarded: no route leaves the node) and its NetworkPolicy agent
// (kube-network-policies, as kind runs it: host network, NET_ADMIN, the
// kernel's nfqueue).
func addons(c config, images map[string]string, networkPolicies bool) string {
	dns := fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
  - apiGroups: [""]
    resources: [services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:%[2]d {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
        }
        cache 30
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: coredns
          image: %[1]q
          imagePullPolicy: Never
          args: [-conf, /etc/coredns/Corefile]
          ports:
            - {name: dns, containerPort: %[2]d, protocol: UDP}
            - {name: dns-tcp, containerPort: %[2]d, protocol: TCP}
          readinessProbe:
            httpGet: {path: /ready, port: 8181}
            periodSeconds: 2
          livenessProbe:
            httpGet: {path: /health, port: 8080}
          resources:
            requests: {cpu: 20m, memory: 32Mi}
            limits: {memory: 128Mi}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
          volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: %[3]s
  selector: {k8s-app: kube-dns}
  ports:
    - {name: dns, port: 53, targetPort: %[2]d, protocol: UDP}
    - {name: dns-tcp, port: 53, targetPort: %[2]d, protocol: TCP}
`, images[corednsImageName], corednsPort, c.DNSServiceIP())
	if !networkPolicies {
		return dns
	}
	return dns + fmt.Sprintf(`---
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-network-policies, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kube-network-policies}
rules:
  - apiGroups: [""]
    resources: [pods, namespaces, nodes]
    verbs: [list, watch]
  - apiGroups: [networking.k8s.io]
    resources: [networkpolicies]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-network-policies}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-network-policies}
subjects: [{kind: ServiceAccount, name: kube-network-policies, namespace: kube-system}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-network-policies, namespace: kube-system, labels: {app: kube-network-policies}}
spec:
  selector: {matchLabels: {app: kube-network-policies}}
  template:
    metadata: {labels: {app: kube-network-policies}}
    spec:
      hostNetwork: true
      serviceAccountName: kube-network-policies
      priorityClassName: system-node-critical
      tolerations: [{operator: Exists}]
      containers:
        - name: kube-network-policies
          image: %q
          imagePullPolicy: Never
          args:
            - --hostname-override=$(NODE_NAME)
            - --disable-nri
            - --metrics-bind-address=127.0.0.1:9080
            - --v=2
          env:
            - name: NODE_NAME
              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
          resources:
            requests: {cpu: 20m, memory: 32Mi}
          securityContext:
            privileged: true
            capabilities: {add: [NET_ADMIN]}
`, images[netpolImageName])
}
