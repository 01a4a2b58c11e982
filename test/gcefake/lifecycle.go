package gcefake

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// --- lifecycle ---

// addLocked records a new instance and starts its backend in the background.
func (s *Server) addLocked(k key, pb *computepb.Instance, created time.Time) *instance {
	pb.Id = proto.Uint64(randomID())
	pb.Kind = proto.String("compute#instance")
	pb.Zone = proto.String(zoneURL(k.project, k.zone))
	pb.SelfLink = proto.String(zoneURL(k.project, k.zone) + "/instances/" + k.name)
	pb.CreationTimestamp = proto.String(created.Format("2006-01-02T15:04:05.000-07:00"))
	pb.Status = proto.String(StatusProvisioning)
	in := &instance{key: k, pb: pb, ready: make(chan struct{})}
	s.instances[k] = in
	meta := metadataMap(pb)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		addr, stop, err := s.opts.Backend.Start(context.Background(), k.String(), meta)
		s.mu.Lock()
		defer s.mu.Unlock()
		in.addr, in.stop, in.startErr = addr, stop, err
		close(in.ready)
		if in.deleting {
			// Deleted while booting: stop what just started (or, for a
			// backend with nothing to stop, mark it stopped), so that the
			// next poll finds it gone.
			s.stopBackendLocked(in)
		}
	}()
	return in
}

// advanceLocked moves a booting instance one step per Get poll:
// PROVISIONING → STAGING → RUNNING (with its natIP, once the backend serves).
// A deleting instance is STOPPING until its backend stopped, then gone.
func (s *Server) advanceLocked(in *instance) {
	if in.deleting {
		select {
		case <-in.stopped:
			s.removeLocked(in)
		default:
		}
		return
	}
	switch in.pb.GetStatus() {
	case StatusProvisioning:
		in.pb.Status = proto.String(StatusStaging)
	case StatusStaging:
		select {
		case <-in.ready:
		default:
			return // still booting
		}
		if in.startErr != nil {
			in.pb.Status = proto.String(StatusTerminated)
			in.pb.StatusMessage = proto.String(in.startErr.Error())
			return
		}
		in.pb.Status = proto.String(StatusRunning)
		setNatIP(in.pb, in.addr)
	}
}

// stopBackendLocked stops the backend in the background and closes
// in.stopped when done (at once if it never started).
func (s *Server) stopBackendLocked(in *instance) {
	select {
	case <-in.ready:
	default:
		return // the start goroutine calls back here when it finishes
	}
	stop, stopped := in.stop, in.stopped
	in.stop = nil
	if stopped == nil {
		stopped = make(chan struct{})
		in.stopped = stopped
	}
	if stop == nil {
		closeOnce(stopped)
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := stop(); err != nil {
			s.opts.Log.Error(err, "stopping instance backend", "instance", in.key.String())
		}
		closeOnce(stopped)
	}()
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// removeLocked forgets an instance (its backend is stopped or stopping).
func (s *Server) removeLocked(in *instance) {
	if !in.deleting {
		in.deleting = true
		s.stopBackendLocked(in)
	}
	if s.instances[in.key] == in {
		delete(s.instances, in.key)
	}
	in.vanishAt = -1
}

// gone reports a removed instance (still referenced by a caller).
func (in *instance) gone() bool { return in.vanishAt < 0 }

// --- wire helpers ---

func zoneURL(project, zone string) string {
	return "https://www.googleapis.com/compute/v1/projects/" + project + "/zones/" + zone
}

func operation(c Call, opType, name string, now time.Time) *computepb.Operation {
	id := randomID()
	ts := now.Format("2006-01-02T15:04:05.000-07:00")
	target := zoneURL(c.Project, c.Zone) + "/instances/" + name
	return &computepb.Operation{
		Kind:          proto.String("compute#operation"),
		Id:            proto.Uint64(id),
		Name:          proto.String(fmt.Sprintf("operation-%d-%s", now.UnixMilli(), randomHex(8))),
		Zone:          proto.String(zoneURL(c.Project, c.Zone)),
		OperationType: proto.String(opType),
		TargetLink:    proto.String(target),
		TargetId:      proto.Uint64(randomID()),
		Status:        computepb.Operation_RUNNING.Enum(),
		User:          proto.String("proxy-operator@fake.iam.gserviceaccount.com"),
		Progress:      proto.Int32(0),
		InsertTime:    proto.String(ts),
		StartTime:     proto.String(ts),
		SelfLink:      proto.String(zoneURL(c.Project, c.Zone) + "/operations/" + fmt.Sprint(id)),
	}
}

func natIP(pb *computepb.Instance) string {
	for _, ni := range pb.GetNetworkInterfaces() {
		for _, ac := range ni.GetAccessConfigs() {
			if ip := ac.GetNatIP(); ip != "" {
				return ip
			}
		}
	}
	return ""
}

// setNatIP sets the address of the first access config, as Compute Engine
// assigns an ephemeral external address to ONE_TO_ONE_NAT.
func setNatIP(pb *computepb.Instance, addr string) {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if len(pb.GetNetworkInterfaces()) == 0 {
		return
	}
	ni := pb.NetworkInterfaces[0]
	ni.NetworkIP = proto.String("10.128.0." + fmt.Sprint(1+int(randomID()%250)))
	if len(ni.AccessConfigs) == 0 || host == "" {
		return
	}
	ni.AccessConfigs[0].NatIP = proto.String(host)
}

// metadataMap is the instance's metadata items, key to value.
func metadataMap(pb *computepb.Instance) map[string]string {
	m := map[string]string{}
	for _, it := range pb.GetMetadata().GetItems() {
		m[it.GetKey()] = it.GetValue()
	}
	return m
}

func randomID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) >> 1
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
