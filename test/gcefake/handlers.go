package gcefake

import (
	"io"
	"net/http"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// --- handlers ---

func (s *Server) insert(r *http.Request, c Call) answer {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return fail(http.StatusBadRequest, "invalid", "reading body: %v", err)
	}
	pb := &computepb.Instance{}
	if err := protojson.Unmarshal(body, pb); err != nil {
		return fail(http.StatusBadRequest, "invalid", "Invalid JSON payload received. %v", err)
	}
	if a, bad := validateInsert(c, pb); bad {
		return a
	}
	k := key{c.Project, c.Zone, pb.GetName()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.RequestID != "" {
		if op, seen := s.requests[c.Project+"/"+c.RequestID]; seen {
			// Compute Engine answers a repeated requestId with the
			// original operation and does nothing else.
			return ok(proto.CloneOf(op))
		}
	}
	if in, exists := s.instances[k]; exists && !in.gone() {
		return fail(http.StatusConflict, "alreadyExists", "The resource 'projects/%s/zones/%s/instances/%s' already exists", c.Project, c.Zone, pb.GetName())
	}
	s.addLocked(k, pb, s.opts.Clock.Now())
	op := operation(c, "insert", pb.GetName(), s.opts.Clock.Now())
	if c.RequestID != "" {
		s.requests[c.Project+"/"+c.RequestID] = op
	}
	return ok(proto.CloneOf(op))
}

// insertVanishing accepts an insert whose instance shows up PROVISIONING for
// one poll and is then gone, as when Compute Engine fails the operation
// after accepting it (quota, ZONE_RESOURCE_POOL_EXHAUSTED).
func (s *Server) insertVanishing(r *http.Request, c Call) answer {
	a := s.insert(r, c)
	if a.err != nil {
		return a
	}
	body := a.msg.(*computepb.Operation)
	name := body.GetTargetLink()[strings.LastIndex(body.GetTargetLink(), "/")+1:]
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, ok := s.instances[key{c.Project, c.Zone, name}]; ok {
		in.vanishAt = 2
	}
	return a
}

func validateInsert(c Call, pb *computepb.Instance) (answer, bool) {
	name := pb.GetName()
	switch {
	case name == "":
		return fail(http.StatusBadRequest, "required", "Required field 'resource.name' not specified"), true
	case !validName(name):
		return fail(http.StatusBadRequest, "invalid", "Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", name), true
	case pb.GetMachineType() == "":
		return fail(http.StatusBadRequest, "required", "Required field 'resource.machineType' not specified"), true
	case !strings.Contains(pb.GetMachineType(), "zones/"+c.Zone+"/machineTypes/"):
		return fail(http.StatusBadRequest, "invalid", "Invalid value for field 'resource.machineType': '%s'. Machine type must be in zone %s.", pb.GetMachineType(), c.Zone), true
	case len(pb.GetDisks()) == 0 || pb.GetDisks()[0].GetInitializeParams().GetSourceImage() == "":
		return fail(http.StatusBadRequest, "required", "Required field 'resource.disks[0].initializeParams.sourceImage' not specified"), true
	case len(pb.GetNetworkInterfaces()) == 0:
		return fail(http.StatusBadRequest, "required", "Required field 'resource.networkInterfaces' not specified"), true
	}
	for k, v := range pb.GetLabels() {
		if !validLabel(k, true) || !validLabel(v, false) {
			return fail(http.StatusBadRequest, "invalid", "Invalid value for field 'resource.labels': '%s=%s'. Label keys and values must conform to [a-z0-9_-]", k, v), true
		}
	}
	return answer{}, false
}

func validName(n string) bool {
	if len(n) == 0 || len(n) > 63 || n[0] < 'a' || n[0] > 'z' || n[len(n)-1] == '-' {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func validLabel(s string, isKey bool) bool {
	if len(s) > 63 || (isKey && (len(s) == 0 || s[0] < 'a' || s[0] > 'z')) {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// lookupLocked finds the live instance a get or delete names.
func (s *Server) lookupLocked(c Call) (*instance, bool) {
	in, exists := s.instances[key{c.Project, c.Zone, c.Name}]
	return in, exists && !in.gone()
}

func (s *Server) get(_ *http.Request, c Call) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, live := s.lookupLocked(c)
	if !live {
		return notFound(c)
	}
	in.polls++
	if in.vanishAt > 0 && in.polls >= in.vanishAt {
		s.removeLocked(in)
		return notFound(c)
	}
	s.advanceLocked(in)
	if in.gone() {
		return notFound(c)
	}
	return ok(proto.CloneOf(in.pb))
}

func notFound(c Call) answer {
	return fail(http.StatusNotFound, "notFound", "The resource 'projects/%s/zones/%s/instances/%s' was not found", c.Project, c.Zone, c.Name)
}

func (s *Server) delete(_ *http.Request, c Call) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, live := s.lookupLocked(c)
	if !live {
		return notFound(c)
	}
	if !in.deleting {
		in.deleting = true
		in.pb.Status = proto.String(StatusStopping)
		in.stopped = make(chan struct{})
		s.stopBackendLocked(in)
	}
	return ok(operation(c, "delete", c.Name, s.opts.Clock.Now()))
}
