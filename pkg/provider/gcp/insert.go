package gcp

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// Ownership labels on every VM, in GCE's label syntax ([a-z0-9_-], no '/'
// or '.'): the Proxy's UID (garbage collection's proof of ownership) and the
// deployment's instance tag (what ListByTag filters on).
const (
	LabelOwnerUID = "proxy-operator-uid"
	LabelTag      = "proxy-operator-tag"
	// LabelSpecHash carries CreateRequest.SpecHash: which spec the VM was
	// built from.
	LabelSpecHash = "proxy-operator-spec"
)

// MetadataUserData is the metadata key cloud-init's GCE datasource reads.
const MetadataUserData = "user-data"

// MetadataProxyAuth is the metadata key of the proxy auth helper's
// configuration (CreateRequest.ProxyAuth): the VM's cloud-init reads it from
// the metadata server and runs Squid with the helper (docs/credentials.md).
const MetadataProxyAuth = "proxy-operator-auth"

// accessConfigName is the conventional name of the external NAT config.
const accessConfigName = "External NAT"

// buildInsertRequest is the pure translation of a CreateRequest into the
// Insert call: project, zone and the Instance resource, plus a requestId
// derived from the owner's UID, the resource itself (so a spec or cloud-init
// change is a new request) and attempt (so a re-creation after the
// instance vanished is a new request too: Compute Engine answers a repeated
// requestId with the old operation and creates nothing).
//
// zone, machineType and image are required and their absence is
// ErrPermanent naming the field: inventing defaults would create billable
// VMs of an arbitrary shape.
func buildInsertRequest(defaultProject string, req provider.CreateRequest, attempt int) (*computepb.InsertInstanceRequest, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if req.Proxy == nil || req.Proxy.GCP == nil {
		return nil, provider.Permanent(errors.New("spec.gcp: required for provider gcp (zone, machineType and image have no defaults)"))
	}
	g := req.Proxy.GCP
	switch {
	case g.Zone == "":
		return nil, provider.Permanent(errors.New("spec.gcp.zone: required"))
	case g.MachineType == "":
		return nil, provider.Permanent(errors.New("spec.gcp.machineType: required"))
	case g.Image == "":
		return nil, provider.Permanent(errors.New("spec.gcp.image: required"))
	}
	tag := req.Tag
	if !validLabelValue(tag) {
		return nil, provider.Permanent(fmt.Errorf("instance tag %q: a GCE label value has at most 63 lowercase letters, digits, '-' or '_'", tag))
	}
	owner := string(req.OwnerUID)
	if !validLabelValue(owner) {
		return nil, provider.Permanent(fmt.Errorf("owner UID %q is not a valid GCE label value", owner))
	}
	project := g.Project
	if project == "" {
		project = defaultProject
	}
	if project == "" {
		return nil, provider.Permanent(errors.New("spec.gcp.project: required when the provider has no default project (--gcp-project)"))
	}

	labels := maps.Clone(g.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	// Ownership labels win over a user label of the same key.
	labels[LabelOwnerUID] = owner
	labels[LabelTag] = tag
	if req.SpecHash != "" {
		labels[LabelSpecHash] = req.SpecHash
	} else {
		delete(labels, LabelSpecHash) // a user label must not pose as one
	}

	ni := &computepb.NetworkInterface{
		AccessConfigs: []*computepb.AccessConfig{{
			Name: proto.String(accessConfigName),
			Type: proto.String(computepb.AccessConfig_ONE_TO_ONE_NAT.String()),
		}},
	}
	if g.Network != "" {
		ni.Network = proto.String(networkURL(g.Network))
	}
	if g.Subnetwork != "" {
		ni.Subnetwork = proto.String(subnetworkURL(g.Zone, g.Subnetwork))
	}

	inst := &computepb.Instance{
		Name:        proto.String(req.Name),
		Description: proto.String(fmt.Sprintf("Squid forward proxy managed by proxy-operator (owner UID %s, namespace %s)", owner, req.Namespace)),
		MachineType: proto.String("zones/" + g.Zone + "/machineTypes/" + g.MachineType),
		Disks: []*computepb.AttachedDisk{{
			Boot:       proto.Bool(true),
			AutoDelete: proto.Bool(true),
			Type:       proto.String(computepb.AttachedDisk_PERSISTENT.String()),
			InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String(g.Image),
			},
		}},
		NetworkInterfaces: []*computepb.NetworkInterface{ni},
		Labels:            labels,
	}
	if len(g.Tags) > 0 {
		inst.Tags = &computepb.Tags{Items: slices.Sorted(slices.Values(g.Tags))}
	}
	var meta []*computepb.Items
	if req.CloudInit != "" {
		meta = append(meta, &computepb.Items{Key: proto.String(MetadataUserData), Value: proto.String(req.CloudInit)})
	}
	if len(req.ProxyAuth) > 0 {
		meta = append(meta, &computepb.Items{Key: proto.String(MetadataProxyAuth), Value: proto.String(string(req.ProxyAuth))})
	}
	if len(meta) > 0 {
		inst.Metadata = &computepb.Metadata{Items: meta}
	}
	if g.Spot {
		// A preempted Spot VM stops (TERMINATED), which the reconciler
		// answers by deleting and recreating it.
		inst.Scheduling = &computepb.Scheduling{
			ProvisioningModel:         proto.String(computepb.Scheduling_SPOT.String()),
			InstanceTerminationAction: proto.String(computepb.Scheduling_STOP.String()),
			AutomaticRestart:          proto.Bool(false),
			OnHostMaintenance:         proto.String(computepb.Scheduling_TERMINATE.String()),
		}
	}
	return &computepb.InsertInstanceRequest{
		Project:          project,
		Zone:             g.Zone,
		InstanceResource: inst,
		RequestId:        proto.String(requestID(owner, inst, attempt)),
	}, nil
}

// requestID is a UUID (the syntax Compute Engine requires) from SHA-256 of
// the owner UID, the deterministic encoding of the resource and the attempt.
func requestID(owner string, inst *computepb.Instance, attempt int) string {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(inst)
	if err != nil {
		body = []byte(inst.String())
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00", owner, attempt)
	h.Write(body)
	b := h.Sum(nil)[:16]
	b[6] = (b[6] & 0x0f) | 0x50 // version 5 layout (name-based, SHA)
	b[8] = (b[8] & 0x3f) | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// networkURL accepts a network name or a (partial) URL.
func networkURL(n string) string {
	if strings.Contains(n, "/") {
		return n
	}
	return "global/networks/" + n
}

// subnetworkURL accepts a subnetwork name (in the zone's region) or a URL.
func subnetworkURL(zone, s string) string {
	if strings.Contains(s, "/") {
		return s
	}
	return "regions/" + regionOf(zone) + "/subnetworks/" + s
}

// regionOf is the region of a zone: "us-central1-a" → "us-central1".
func regionOf(zone string) string {
	if i := strings.LastIndex(zone, "-"); i > 0 {
		return zone[:i]
	}
	return zone
}

// validLabelValue: at most 63 of [a-z0-9_-].
func validLabelValue(v string) bool {
	if len(v) > 63 {
		return false
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// ValidTag reports whether tag can be a GCE label value, as the gcp
// provider stores --instance-tag.
func ValidTag(tag string) bool { return tag != "" && validLabelValue(tag) }
