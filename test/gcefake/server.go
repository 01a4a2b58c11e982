package gcefake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/utils/clock"
)

// Instance statuses the fake uses (compute/v1 Instance.status).
const (
	StatusProvisioning = "PROVISIONING"
	StatusStaging      = "STAGING"
	StatusRunning      = "RUNNING"
	StatusStopping     = "STOPPING"
	StatusTerminated   = "TERMINATED"
)

// Options configure a Server. The zero value works: no backend (instances
// get an address nothing listens on), pages of 500, the real clock.
type Options struct {
	// Backend serves each instance once it boots; nil: NoBackend.
	Backend Backend
	// PageSize caps the items of one aggregatedList page (a request's
	// smaller maxResults wins). Default 500, as Compute Engine.
	PageSize int
	// Zones are listed by aggregatedList even when empty (with a
	// NO_RESULTS_ON_PAGE warning), besides every zone holding an instance.
	// Default DefaultZones.
	Zones []string
	// Clock stamps creation times. Default the real clock.
	Clock clock.PassiveClock
	// Log receives one line per call at V(1). Default discarded.
	Log logr.Logger
}

// DefaultZones are a few real zone names.
var DefaultZones = []string{"europe-west1-b", "us-central1-a", "us-central1-b", "us-east1-b"}

// Call is one request the fake answered, in arrival order.
type Call struct {
	// Op is "insert", "get", "delete" or "list".
	Op string
	// Project, Zone (empty for list) and Name (empty for list) from the path.
	Project, Zone, Name string
	// RequestID is the requestId query parameter, if any.
	RequestID string
	// Code is the HTTP status answered.
	Code int
}

// Server is the fake endpoint. Serve it with Start (its own listener) or use
// it as an http.Handler. Safe for concurrent use.
type Server struct {
	opts Options

	httpSrv  *http.Server
	listener net.Listener
	serveErr chan error

	mu        sync.Mutex
	instances map[key]*instance
	requests  map[string]*computepb.Operation // insert requestId → its Operation
	calls     []Call
	faults    []*faultEntry
	random    []*randomFault
	unreach   map[string]bool // "project/zone" ("/zone": every project) → unreachable for listings
	closed    bool
	wg        sync.WaitGroup // backend starts and stops in flight
}

type key struct{ project, zone, name string }

func (k key) String() string { return k.project + "/" + k.zone + "/" + k.name }

// instance is one VM.
type instance struct {
	key      key
	pb       *computepb.Instance // status and natIP filled as it boots
	polls    int                 // Gets observed since insert
	vanishAt int                 // >0: gone at this Get poll (accepted-then-vanished)
	ready    chan struct{}       // closed once the backend serves (or failed)
	addr     string              // backend address once ready
	startErr error
	stop     func() error // stops the backend
	deleting bool
	stopped  chan struct{} // closed once the backend stopped after delete
}

// New returns a Server; call Start to listen on loopback, or mount Handler.
func New(opts Options) *Server {
	if opts.Backend == nil {
		opts.Backend = &NoBackend{}
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 500
	}
	if opts.Zones == nil {
		opts.Zones = DefaultZones
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	return &Server{
		opts:      opts,
		instances: map[key]*instance{},
		requests:  map[string]*computepb.Operation{},
		unreach:   map[string]bool{},
	}
}

// Start serves on addr (e.g. "127.0.0.1:0") and returns the endpoint URL to
// give the client (option.WithEndpoint): "http://host:port", no path.
func (s *Server) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("fake compute engine: listening on %s: %w", addr, err)
	}
	s.listener = ln
	s.httpSrv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.serveErr = make(chan error, 1)
	go func() { s.serveErr <- s.httpSrv.Serve(ln) }()
	return s.URL(), nil
}

// URL is the endpoint of a started server.
func (s *Server) URL() string {
	if s.listener == nil {
		return ""
	}
	return "http://" + s.listener.Addr().String()
}

// Close stops serving and stops every backend (every Squid), waiting for
// them. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.httpSrv.Shutdown(ctx); err != nil {
			_ = s.httpSrv.Close()
		}
		cancel()
	}
	// Backend starts in flight record their stop functions; stops in
	// flight finish.
	s.wg.Wait()
	s.mu.Lock()
	var stops []func() error
	for _, in := range s.instances {
		if in.stop != nil {
			stops = append(stops, in.stop)
			in.stop = nil
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, stop := range stops {
		if err := stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Calls returns the requests answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// CallCounts counts the answered requests by op.
func (s *Server) CallCounts() map[string]int {
	out := map[string]int{}
	for _, c := range s.Calls() {
		out[c.Op]++
	}
	return out
}

// InstanceInfo is what a test sees of one instance.
type InstanceInfo struct {
	Project, Zone, Name string
	Status              string
	NatIP               string
	Labels              map[string]string
	MachineType         string
	CreationTimestamp   string
	// Instance is a copy of the full resource as Get would answer it.
	Instance *computepb.Instance
}

// Instances lists every instance that exists (not yet deleted), sorted by
// project, zone and name.
func (s *Server) Instances() []InstanceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []InstanceInfo
	for _, in := range s.instances {
		if in.gone() {
			continue
		}
		pb := proto.CloneOf(in.pb)
		out = append(out, InstanceInfo{
			Project: in.key.project, Zone: in.key.zone, Name: in.key.name,
			Status: pb.GetStatus(), NatIP: natIP(pb), Labels: pb.GetLabels(),
			MachineType: pb.GetMachineType(), CreationTimestamp: pb.GetCreationTimestamp(),
			Instance: pb,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].keyString() < out[j].keyString() })
	return out
}

func (i InstanceInfo) keyString() string { return i.Project + "/" + i.Zone + "/" + i.Name }

// Plant adds an instance directly, as if someone had created it long ago
// (garbage-collection tests): it is RUNNING at once with the given labels and
// creation time and served by the backend like any other.
func (s *Server) Plant(project, zone, name string, labels map[string]string, created time.Time) error {
	pb := &computepb.Instance{
		Name:        proto.String(name),
		MachineType: proto.String(zoneURL(project, zone) + "/machineTypes/e2-small"),
		Labels:      labels,
		NetworkInterfaces: []*computepb.NetworkInterface{{
			AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("External NAT"), Type: proto.String("ONE_TO_ONE_NAT")}},
		}},
	}
	k := key{project, zone, name}
	s.mu.Lock()
	if in, ok := s.instances[k]; ok && !in.gone() {
		s.mu.Unlock()
		return fmt.Errorf("instance %s exists", k)
	}
	in := s.addLocked(k, pb, created)
	s.mu.Unlock()
	<-in.ready // the backend serves (or failed)
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.startErr != nil {
		return fmt.Errorf("planting %s: %w", k, in.startErr)
	}
	in.pb.Status = proto.String(StatusRunning)
	setNatIP(in.pb, in.addr)
	return nil
}

// SetUnreachable makes listings of project ("" for every project) skip zone
// and report it in unreachables (or reach it again).
func (s *Server) SetUnreachable(project, zone string, unreachable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if unreachable {
		s.unreach[project+"/"+zone] = true
	} else {
		delete(s.unreach, project+"/"+zone)
	}
}

// unreachableLocked reports whether listings of project cannot reach zone.
func (s *Server) unreachableLocked(project, zone string) bool {
	return s.unreach[project+"/"+zone] || s.unreach["/"+zone]
}

// ServeHTTP routes the four instance calls; anything else is a 404 in
// Compute Engine's error format.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// compute v1 projects {p} zones {z} instances [{n}]  |  compute v1 projects {p} aggregated instances
	if len(parts) < 6 || parts[0] != "compute" || parts[1] != "v1" || parts[2] != "projects" {
		writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The requested URL %s was not found.", r.URL.Path))
		return
	}
	project := parts[3]
	switch {
	case len(parts) == 6 && parts[4] == "aggregated" && parts[5] == "instances" && r.Method == http.MethodGet:
		s.serve(w, r, Call{Op: OpList, Project: project}, s.list)
	case len(parts) == 7 && parts[4] == "zones" && parts[6] == "instances" && r.Method == http.MethodPost:
		s.serve(w, r, Call{Op: OpInsert, Project: project, Zone: parts[5], RequestID: r.URL.Query().Get("requestId")}, s.insert)
	case len(parts) == 8 && parts[4] == "zones" && parts[6] == "instances" && r.Method == http.MethodGet:
		s.serve(w, r, Call{Op: OpGet, Project: project, Zone: parts[5], Name: parts[7]}, s.get)
	case len(parts) == 8 && parts[4] == "zones" && parts[6] == "instances" && r.Method == http.MethodDelete:
		s.serve(w, r, Call{Op: OpDelete, Project: project, Zone: parts[5], Name: parts[7], RequestID: r.URL.Query().Get("requestId")}, s.delete)
	default:
		writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The requested URL %s %s was not found.", r.Method, r.URL.Path))
	}
}

// Ops of Call.Op and Fault.Op.
const (
	OpInsert = "insert"
	OpGet    = "get"
	OpDelete = "delete"
	OpList   = "list"
)

// answer is what a handler returns: a message to send as protojson with
// status 200, or an API error.
type answer struct {
	msg  proto.Message
	code int
	err  *apiError
}

type apiError struct {
	code        int
	reason, msg string
}

func ok(m proto.Message) answer { return answer{msg: m, code: http.StatusOK} }

func fail(code int, reason, format string, args ...any) answer {
	return answer{code: code, err: &apiError{code: code, reason: reason, msg: fmt.Sprintf(format, args...)}}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, c Call, h func(*http.Request, Call) answer) {
	f := s.takeFault(c)
	if f != nil && f.Delay > 0 {
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
		}
	}
	var a answer
	switch {
	case f != nil && f.Code != 0:
		a = fail(f.Code, f.Reason, "%s", f.message())
	case f != nil && f.Vanish && c.Op == OpInsert:
		a = s.insertVanishing(r, c)
	default:
		a = h(r, c)
	}
	c.Code = a.code
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	s.opts.Log.V(1).Info("compute call", "op", c.Op, "project", c.Project, "zone", c.Zone, "name", c.Name, "code", a.code)
	if a.err != nil {
		writeError(w, a.err.code, a.err.reason, a.err.msg)
		return
	}
	body, err := protojson.Marshal(a.msg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "backendError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// writeError writes Compute Engine's error body:
// {"error":{"code":N,"message":M,"errors":[{"message":M,"domain":"global","reason":R}]}}.
func writeError(w http.ResponseWriter, code int, reason, msg string) {
	type item struct {
		Message string `json:"message"`
		Domain  string `json:"domain"`
		Reason  string `json:"reason"`
	}
	type body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Errors  []item `json:"errors"`
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]body{"error": {Code: code, Message: msg, Errors: []item{{Message: msg, Domain: "global", Reason: reason}}}})
}
