package nodeagent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// ClusterDomain is the DNS suffix of Service names (<svc>.<ns>.svc.<domain>).
const ClusterDomain = "cluster.local"

// ServiceProxy stands in for kube-proxy and cluster DNS on this machine, for
// Services whose ClusterIP is on loopback (kube-apiserver started with
// --service-cluster-ip-range=ServiceNetwork). It listens on each such
// ClusterIP:port and sends every connection to one endpoint of the Service's
// EndpointSlices (written by kube-controller-manager's endpointslice
// controller): a ready one, round-robin, else a serving terminating one, as
// kube-proxy does; a pod IP is reached at its PodLoopback. Open connections
// outlive a change of endpoints, as conntrack entries do. Hosts and Resolve
// answer what cluster DNS would for <svc>.<ns>.svc. Refusals lists the
// connections that reached no server (an endpoint that did not listen).
type ServiceProxy struct {
	client kubernetes.Interface
	log    logr.Logger

	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister

	mu        sync.Mutex
	listeners map[string]net.Listener // by ClusterIP:port
	next      map[string]int          // round-robin position by ClusterIP:port
	refusals  []Refusal
	conns     sync.WaitGroup
	synced    chan struct{}
}

// Refusal is a connection to a Service that reached no server: the
// endpoint it was sent to refused it, or the Service had none.
type Refusal struct {
	At time.Time
	// Service is namespace/name.
	Service string
	// Endpoint is the loopback address it was sent to, "" when none.
	Endpoint string
	Err      string
}

// maxRefusals bounds what Refusals keeps (the first ones).
const maxRefusals = 1000

// NewServiceProxy returns a Service proxy for the cluster at cfg; Run starts it.
func NewServiceProxy(cfg *rest.Config, log logr.Logger) (*ServiceProxy, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating clientset: %w", err)
	}
	return &ServiceProxy{client: cs, log: log, listeners: map[string]net.Listener{}, next: map[string]int{}, synced: make(chan struct{})}, nil
}

// Synced is closed once the proxy listens for every Service it saw at start.
func (p *ServiceProxy) Synced() <-chan struct{} { return p.synced }

// Run serves until ctx ends, then closes its listeners and waits for open
// connections to end.
func (p *ServiceProxy) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(p.client, 0)
	p.services = factory.Core().V1().Services().Lister()
	p.slices = factory.Discovery().V1().EndpointSlices().Lister()
	changed := make(chan struct{}, 1)
	notify := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := factory.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: notify, UpdateFunc: func(_, o any) { notify(o) }, DeleteFunc: notify,
	}); err != nil {
		return fmt.Errorf("watching Services: %w", err)
	}
	factory.Discovery().V1().EndpointSlices().Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("syncing %v informer", typ)
		}
	}
	p.syncListeners(ctx)
	close(p.synced)
	for {
		select {
		case <-ctx.Done():
			p.mu.Lock()
			for k, l := range p.listeners {
				_ = l.Close()
				delete(p.listeners, k)
			}
			p.mu.Unlock()
			p.conns.Wait()
			return nil
		case <-changed:
			p.syncListeners(ctx)
		}
	}
}

// syncListeners listens on every loopback ClusterIP:port of a TCP Service
// port and stops listening where none is left.
func (p *ServiceProxy) syncListeners(ctx context.Context) {
	svcs, err := p.services.List(labels.Everything())
	if err != nil {
		p.log.Error(err, "listing Services")
		return
	}
	want := map[string]bool{}
	for _, svc := range svcs {
		ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil || !ServiceNetwork.Contains(ip) {
			continue
		}
		for _, port := range svc.Spec.Ports {
			if port.Protocol != "" && port.Protocol != corev1.ProtocolTCP {
				continue
			}
			want[net.JoinHostPort(ip.String(), strconv.Itoa(int(port.Port)))] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, l := range p.listeners {
		if !want[addr] {
			_ = l.Close()
			delete(p.listeners, addr)
		}
	}
	for addr := range want {
		if p.listeners[addr] != nil {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			// A Service port below 1024 needs root or CAP_NET_BIND_SERVICE.
			p.log.Error(err, "listening for a Service", "addr", addr)
			continue
		}
		p.listeners[addr] = l
		p.conns.Add(1)
		go func() {
			defer p.conns.Done()
			p.serve(ctx, l, addr)
		}()
	}
}

func (p *ServiceProxy) serve(ctx context.Context, l net.Listener, addr string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		p.conns.Add(1)
		go func() {
			defer p.conns.Done()
			p.forward(ctx, c, addr)
		}()
	}
}

// forward relays c to one endpoint of the Service at addr, picked
// round-robin. Like kube-proxy's DNAT, nothing retries another endpoint:
// when the pick refuses, so does the connection.
func (p *ServiceProxy) forward(ctx context.Context, c net.Conn, addr string) {
	defer c.Close()
	svc, ep := p.endpoint(addr)
	if ep == "" {
		p.refused(svc, "", "no endpoint")
		return
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	up, err := d.DialContext(ctx, "tcp", ep)
	if err != nil {
		p.refused(svc, ep, err.Error())
		return
	}
	defer up.Close()
	Relay(ctx, c, up)
}

// Relay copies bytes both ways between a and b, closing each side's write
// half when the other side's reads end, until both directions have ended or
// ctx ends; the caller closes a and b.
func Relay(ctx context.Context, a, b net.Conn) {
	done := make(chan struct{}, 2)
	relay := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go relay(b, a)
	go relay(a, b)
	select {
	case <-done:
		<-done
	case <-ctx.Done():
	}
}

// refused records a connection that reached no server.
func (p *ServiceProxy) refused(svc, ep, why string) {
	p.log.Info("connection to a Service reached no server", "service", svc, "endpoint", ep, "error", why)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.refusals) < maxRefusals {
		p.refusals = append(p.refusals, Refusal{At: time.Now(), Service: svc, Endpoint: ep, Err: why})
	}
}

// Refusals are the connections so far that reached no server (the first
// maxRefusals), oldest first.
func (p *ServiceProxy) Refusals() []Refusal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.refusals)
}

// endpoint is the Service (namespace/name) at addr (ClusterIP:port) and the
// loopback address a new connection to it goes to, "" when it has no
// endpoint.
func (p *ServiceProxy) endpoint(addr string) (svcName, ep string) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, ""
	}
	svcs, err := p.services.List(labels.Everything())
	if err != nil {
		return addr, ""
	}
	i := slices.IndexFunc(svcs, func(s *corev1.Service) bool { return s.Spec.ClusterIP == host })
	if i < 0 {
		return addr, ""
	}
	svc := svcs[i]
	svcName = svc.Namespace + "/" + svc.Name
	var portName string
	for _, sp := range svc.Spec.Ports {
		if strconv.Itoa(int(sp.Port)) == portStr {
			portName = sp.Name
		}
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name})
	eps, err := p.slices.EndpointSlices(svc.Namespace).List(sel)
	if err != nil {
		return svcName, ""
	}
	ready, terminating := ServiceEndpoints(eps, portName)
	list := ready
	if len(list) == 0 {
		list = terminating
	}
	if len(list) == 0 {
		return svcName, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next[addr]++
	return svcName, list[p.next[addr]%len(list)]
}

// ServiceEndpoints are the loopback host:ports of the endpoints of slices for
// the Service port named portName: ready ones, and serving terminating ones
// (kube-proxy's fallback when none is ready), each sorted.
func ServiceEndpoints(eps []*discoveryv1.EndpointSlice, portName string) (ready, terminating []string) {
	for _, s := range eps {
		var port int32 = -1
		for _, sp := range s.Ports {
			if sp.Port != nil && (sp.Name == nil && portName == "" || sp.Name != nil && *sp.Name == portName) {
				port = *sp.Port
			}
		}
		if port < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			isReady := e.Conditions.Ready == nil || *e.Conditions.Ready
			serving := e.Conditions.Serving == nil || *e.Conditions.Serving
			isTerminating := e.Conditions.Terminating != nil && *e.Conditions.Terminating
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				if lo, ok := PodLoopback(ip); ok {
					ip = lo
				}
				hp := net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
				switch {
				case isReady:
					ready = append(ready, hp)
				case serving && isTerminating:
					terminating = append(terminating, hp)
				}
			}
		}
	}
	slices.Sort(ready)
	slices.Sort(terminating)
	return ready, terminating
}

// Resolve answers a Service name (<svc>.<ns>.svc, optionally followed by
// .ClusterDomain) with its ClusterIP, as cluster DNS would.
func (p *ServiceProxy) Resolve(host string) (netip.Addr, bool) {
	host = strings.TrimSuffix(strings.TrimSuffix(host, "."), "."+ClusterDomain)
	parts := strings.Split(host, ".")
	if len(parts) != 3 || parts[2] != "svc" || p.services == nil {
		return netip.Addr{}, false
	}
	svc, err := p.services.Services(parts[1]).Get(parts[0])
	if err != nil {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	return ip, err == nil
}

// Hosts is an /etc/hosts for a pod: localhost, and every loopback Service
// under its DNS names, in the place of cluster DNS.
func (p *ServiceProxy) Hosts() []byte {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	if p.services == nil {
		return []byte(b.String())
	}
	svcs, _ := p.services.List(labels.Everything())
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for _, s := range svcs {
		ip, err := netip.ParseAddr(s.Spec.ClusterIP)
		if err != nil || !ServiceNetwork.Contains(ip) {
			continue
		}
		fmt.Fprintf(&b, "%s\t%s.%s.svc %s.%s.svc.%s\n", ip, s.Name, s.Namespace, s.Name, s.Namespace, ClusterDomain)
	}
	return []byte(b.String())
}

// DialContext dials addr, resolving a Service name first: for clients in
// tests that use in-cluster URLs.
func (p *ServiceProxy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip, ok := p.Resolve(host); ok {
		addr = net.JoinHostPort(ip.String(), port)
	} else if strings.HasSuffix(host, ".svc") || strings.HasSuffix(host, ".svc."+ClusterDomain) {
		return nil, &net.DNSError{Err: "no such Service", Name: host, IsNotFound: true}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}
