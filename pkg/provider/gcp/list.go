package gcp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// ListByTag lists the VMs labelled proxy-operator-tag=<tag> in every project
// the provider knows (the default one, those Creates named and those the
// Proxies name), through
// AggregatedList with returnPartialSuccess, every page. Zones Compute Engine
// reports unreachable make the answer an incomplete listing: the instances
// read, plus an error naming "projects/<p>/zones/<z>" for each such zone.
//
// AggregatedList ignores its context, so each page is bounded by the HTTP
// client's timeout (RequestTimeout) and the context is checked between pages.
func (p *Provider) ListByTag(ctx context.Context, tag string) ([]provider.Instance, error) {
	if !ValidTag(tag) {
		return nil, provider.NewError(provider.ErrPermanent, provider.OpList,
			fmt.Errorf("tag %q: a GCE label value has at most 63 lowercase letters, digits, '-' or '_'", tag))
	}
	projects := p.listProjects()
	var out []provider.Instance
	var unreachable []string
	for _, project := range projects {
		insts, missing, err := p.listProject(ctx, project, tag)
		if err != nil {
			return nil, err
		}
		out = append(out, insts...)
		unreachable = append(unreachable, missing...)
	}
	if len(unreachable) > 0 {
		return out, provider.Incomplete(unreachable)
	}
	return out, nil
}

func (p *Provider) listProject(ctx context.Context, project, tag string) ([]provider.Instance, []string, error) {
	it := p.client.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
		Project:              project,
		Filter:               proto.String(fmt.Sprintf("labels.%s = %q", LabelTag, tag)),
		ReturnPartialSuccess: proto.Bool(true),
	})
	var out []provider.Instance
	missing := map[string]bool{}
	var lastPage any
	notePage := func() {
		if it.Response == lastPage {
			return
		}
		lastPage = it.Response
		if resp, ok := it.Response.(*computepb.InstanceAggregatedList); ok {
			for _, u := range resp.GetUnreachables() {
				missing[unreachableScope(project, u)] = true
			}
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, provider.NewError(provider.ErrTransient, provider.OpList, fmt.Errorf("listing project %s: %w", project, err))
		}
		pair, err := it.Next()
		notePage()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, nil, classify(provider.OpList, fmt.Errorf("listing instances of project %s tagged %q: %w", project, tag, err))
		}
		zone := strings.TrimPrefix(pair.Key, "zones/")
		for _, inst := range pair.Value.GetInstances() {
			// The filter already selects the tag; checking again keeps a
			// lax server from handing GC someone else's VM.
			if inst.GetLabels()[LabelTag] != tag {
				continue
			}
			out = append(out, p.instance(project, zone, inst))
		}
	}
	scopes := make([]string, 0, len(missing))
	for s := range missing {
		scopes = append(scopes, s)
	}
	return out, scopes, nil
}

// unreachableScope turns an unreachables entry ("zones/<z>", or a longer
// path naming the zone) into "projects/<p>/zones/<z>"; anything else is kept
// under the project as given.
func unreachableScope(project, u string) string {
	parts := strings.Split(u, "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "zones" {
			return scope(project, parts[i+1])
		}
	}
	return "projects/" + project + "/" + u
}
