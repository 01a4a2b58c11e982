package gcefake

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// labelFilter is the filter syntax the fake understands: one label equality,
// `labels.<key> = "<value>"` (quotes optional, `=` or `eq`). Anything else is
// a 400, so a provider that sends another filter finds out here rather than
// in production.
var labelFilter = regexp.MustCompile(`^\s*\(?\s*labels\.([a-z][-_a-z0-9]*)\s*(?:=|eq)\s*"?([-_a-z0-9]*)"?\s*\)?\s*$`)

// list answers aggregatedList: every instance of the project matching the
// filter, grouped by "zones/<z>", in pages of at most PageSize (or the
// request's maxResults), ordered by zone then name. Zones without results
// carry a NO_RESULTS_ON_PAGE warning on the first page; unreachable zones
// are left out and named in unreachables on every page.
func (s *Server) list(r *http.Request, c Call) answer {
	q := r.URL.Query()
	var fk, fv string
	filtered := false
	if f := q.Get("filter"); f != "" {
		m := labelFilter.FindStringSubmatch(f)
		if m == nil {
			return fail(http.StatusBadRequest, "invalid", "Invalid value for field 'filter': '%s'. Invalid list filter expression.", f)
		}
		fk, fv, filtered = m[1], m[2], true
	}
	pageSize := s.opts.PageSize
	if mr := q.Get("maxResults"); mr != "" {
		n, err := strconv.Atoi(mr)
		if err != nil || n < 0 || n > 500 {
			return fail(http.StatusBadRequest, "invalid", "Invalid value for field 'maxResults': '%s'. Must be between 0 and 500.", mr)
		}
		if n > 0 && n < pageSize {
			pageSize = n
		}
	}
	offset := 0
	if tok := q.Get("pageToken"); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 {
			return fail(http.StatusBadRequest, "invalid", "Invalid value for field 'pageToken': '%s'.", tok)
		}
		offset = n
	}

	s.mu.Lock()
	if offset == 0 {
		// A deleted instance vanishes once its deletion finished, whether
		// or not anyone polls it (only a new listing drops it, so the
		// offsets of a listing's later pages do not shift).
		for _, in := range s.instances {
			if in.key.project == c.Project && in.deleting {
				s.advanceLocked(in)
			}
		}
	}
	zones := map[string]bool{}
	for _, z := range s.opts.Zones {
		zones[z] = true
	}
	var matched []*computepb.Instance
	var matchedZones []string
	for _, in := range s.instances {
		if in.key.project != c.Project || in.gone() {
			continue
		}
		zones[in.key.zone] = true
		if s.unreachableLocked(c.Project, in.key.zone) {
			continue
		}
		if filtered {
			if v, ok := in.pb.GetLabels()[fk]; !ok || v != fv {
				continue
			}
		}
		matched = append(matched, proto.CloneOf(in.pb))
		matchedZones = append(matchedZones, in.key.zone)
	}
	var unreachables []string
	for z := range zones {
		if s.unreachableLocked(c.Project, z) {
			unreachables = append(unreachables, "zones/"+z)
		}
	}
	s.mu.Unlock()

	idx := make([]int, len(matched))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		za, zb := matchedZones[idx[a]], matchedZones[idx[b]]
		if za != zb {
			return za < zb
		}
		return matched[idx[a]].GetName() < matched[idx[b]].GetName()
	})
	if offset > len(idx) {
		offset = len(idx)
	}
	end := min(offset+pageSize, len(idx))
	resp := &computepb.InstanceAggregatedList{
		Kind:     proto.String("compute#instanceAggregatedList"),
		Id:       proto.String("projects/" + c.Project + "/aggregated/instances"),
		SelfLink: proto.String("https://www.googleapis.com/compute/v1/projects/" + c.Project + "/aggregated/instances"),
		Items:    map[string]*computepb.InstancesScopedList{},
	}
	for _, i := range idx[offset:end] {
		scope := "zones/" + matchedZones[i]
		sl := resp.Items[scope]
		if sl == nil {
			sl = &computepb.InstancesScopedList{}
			resp.Items[scope] = sl
		}
		sl.Instances = append(sl.Instances, matched[i])
	}
	if offset == 0 {
		for z := range zones {
			scope := "zones/" + z
			if _, has := resp.Items[scope]; has || slices.Contains(unreachables, scope) {
				continue
			}
			resp.Items[scope] = &computepb.InstancesScopedList{Warning: &computepb.Warning{
				Code:    proto.String(computepb.Warning_NO_RESULTS_ON_PAGE.String()),
				Message: proto.String(fmt.Sprintf("There are no results for scope '%s' on this page.", scope)),
				Data:    []*computepb.Data{{Key: proto.String("scope"), Value: proto.String(scope)}},
			}}
		}
	}
	if end < len(idx) {
		resp.NextPageToken = proto.String(strconv.Itoa(end))
	}
	sort.Strings(unreachables)
	resp.Unreachables = unreachables
	return ok(resp)
}
