package gc

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// Result is how a sweep ended (the result label of the sweeps metric).
type Result string

const (
	// ResultComplete: every provider was listed in full and every orphan
	// found was deleted (or, in a dry run, reported).
	ResultComplete Result = "complete"
	// ResultPartial: a provider could not be listed, a listing missed some
	// scopes, a deletion failed or the sweep was interrupted; what could be
	// decided safely was done.
	ResultPartial Result = "partial"
	// ResultSkipped: the Proxies could not be listed, so nothing was
	// decided (an unknown live set must never look empty).
	ResultSkipped Result = "skipped"
)

// Results returns every Result as a string, for exporting their series at 0.
func Results() []string {
	return []string{string(ResultComplete), string(ResultPartial), string(ResultSkipped)}
}

// Verdict is the decision about one listed instance.
type Verdict string

const (
	// Orphan: owned by no Proxy, old enough, listed in full. Delete.
	Orphan Verdict = "orphan"
	// KeepUnlabelled: no owner UID, so no proof this deployment made it.
	KeepUnlabelled Verdict = "unlabelled"
	// KeepForeignTag: tagged for another deployment (a lax listing).
	KeepForeignTag Verdict = "foreignTag"
	// KeepLive: its UID is a Proxy's, one being deleted included.
	KeepLive Verdict = "live"
	// KeepYoung: younger than MinAge; it may be mid-create.
	KeepYoung Verdict = "young"
	// KeepUnreachable: in a scope the listing could not read in full.
	KeepUnreachable Verdict = "unreachableScope"
	// KeepTerminating: already going away.
	KeepTerminating Verdict = "terminating"
)

// Found is one orphan a sweep acted on.
type Found struct {
	Provider   string
	ProviderID string
	UID        types.UID
	Age        time.Duration
	// Deleted is true once Delete succeeded; false in a dry run or when
	// Delete failed (Err).
	Deleted bool
	Err     error
}

// Report is what one sweep did.
type Report struct {
	Result Result
	// Orphans are the orphans found, in provider then providerID order.
	Orphans []Found
	// Kept counts the instances spared, by verdict.
	Kept map[Verdict]int
	// Errors are the listing, deletion and Proxy-list failures.
	Errors []error
}

// Sweep runs one sweep now: it lists the Proxies, then each provider's
// instances with this deployment's tag, and deletes the orphans.
func (s *Sweeper) Sweep(ctx context.Context) Report {
	logger := log.FromContext(ctx)
	rep := Report{Result: ResultComplete, Kept: map[Verdict]int{}}
	defer func() { s.cfg.Recorder.GCSweep(string(rep.Result), s.cfg.Clock.Now()) }()

	live, err := s.liveUIDs(ctx)
	if err != nil {
		rep.Result = ResultSkipped
		rep.Errors = append(rep.Errors, err)
		logger.Error(err, "orphan sweep skipped: the live set is unknown")
		return rep
	}
	providers := s.cfg.Providers.All()
	for _, name := range slices.Sorted(maps.Keys(providers)) {
		if ctx.Err() != nil {
			rep.Result = ResultPartial
			rep.Errors = append(rep.Errors, fmt.Errorf("sweep interrupted before provider %s: %w", name, ctx.Err()))
			break
		}
		s.sweepProvider(ctx, name, providers[name], live, &rep)
	}
	logger.Info("orphan sweep done", "result", rep.Result, "orphans", len(rep.Orphans), "kept", rep.Kept, "dryRun", s.cfg.DryRun)
	return rep
}

func (s *Sweeper) liveUIDs(ctx context.Context) (map[types.UID]bool, error) {
	var proxies crawlv1alpha1.ProxyList
	if err := s.cfg.Reader.List(ctx, &proxies, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Proxies: %w", err)
	}
	live := make(map[types.UID]bool, len(proxies.Items))
	for i := range proxies.Items {
		// A Proxy being deleted stays live: its finalizer owns that
		// deletion, and a second Delete would race it.
		live[proxies.Items[i].UID] = true
	}
	return live, nil
}

func deletedKey(provider, providerID string) string { return provider + "\x00" + providerID }

func (s *Sweeper) sweepProvider(ctx context.Context, name string, p provider.Provider, live map[types.UID]bool, rep *Report) {
	logger := log.FromContext(ctx).WithValues("provider", name)
	insts, err := p.ListByTag(ctx, s.cfg.Tag)
	unreachable := map[string]bool{}
	if err != nil {
		rep.Result = ResultPartial
		rep.Errors = append(rep.Errors, fmt.Errorf("listing %s instances: %w", name, err))
		scopes, partial := provider.UnreachableScopes(err)
		if !partial {
			logger.Error(err, "orphan sweep: listing failed, provider skipped")
			return
		}
		logger.Info("orphan sweep: some scopes unreachable, nothing there is deleted", "unreachable", scopes)
		for _, sc := range scopes {
			unreachable[sc] = true
		}
	}
	slices.SortFunc(insts, func(a, b provider.Instance) int { return strings.Compare(a.ProviderID, b.ProviderID) })
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		// A full listing: forget the deleted orphans that are gone.
		listed := make(map[string]bool, len(insts))
		for _, inst := range insts {
			listed[deletedKey(name, inst.ProviderID)] = true
		}
		for k := range s.deleted {
			if strings.HasPrefix(k, name+"\x00") && !listed[k] {
				delete(s.deleted, k)
			}
		}
	}
	for _, inst := range insts {
		v := decide(inst, s.cfg.Tag, live, unreachable, now, s.cfg.MinAge)
		if at, ok := s.deleted[deletedKey(name, inst.ProviderID)]; ok && v == Orphan && now.Sub(at) < redeleteAfter {
			v = KeepTerminating // already being deleted
		}
		if v != Orphan {
			rep.Kept[v]++
			continue
		}
		f := Found{Provider: name, ProviderID: inst.ProviderID, UID: inst.OwnerUID, Age: now.Sub(inst.CreatedAt)}
		kv := []any{"providerID", f.ProviderID, "uid", f.UID, "age", f.Age.Round(time.Second).String()}
		if s.cfg.DryRun {
			logger.Info("WARNING: dry run: would delete orphaned instance", kv...)
			rep.Orphans = append(rep.Orphans, f)
			continue
		}
		if ctx.Err() != nil {
			rep.Result = ResultPartial
			rep.Errors = append(rep.Errors, fmt.Errorf("sweep interrupted before deleting %s: %w", f.ProviderID, ctx.Err()))
			return
		}
		logger.Info("WARNING: deleting orphaned instance", kv...)
		if f.Err = p.Delete(ctx, inst.ProviderID); f.Err != nil {
			rep.Result = ResultPartial
			rep.Errors = append(rep.Errors, fmt.Errorf("deleting %s orphan %s: %w", name, f.ProviderID, f.Err))
			logger.Error(f.Err, "deleting orphaned instance failed", kv...)
		} else {
			f.Deleted = true
			s.deleted[deletedKey(name, inst.ProviderID)] = now
			s.cfg.Recorder.GCDeleted(name)
		}
		rep.Orphans = append(rep.Orphans, f)
	}
}

// decide is the rule for one instance of a listing: Orphan only when the
// instance carries the tag and an owner UID, that UID is no Proxy's, it is at
// least minAge old at now, it is not already terminating, and its scope was
// read in full.
func decide(inst provider.Instance, tag string, live map[types.UID]bool, unreachable map[string]bool, now time.Time, minAge time.Duration) Verdict {
	switch {
	case inst.OwnerUID == "":
		return KeepUnlabelled
	case inst.Tag != tag:
		return KeepForeignTag
	case live[inst.OwnerUID]:
		return KeepLive
	case inst.Scope != "" && unreachable[inst.Scope]:
		return KeepUnreachable
	case inst.CreatedAt.IsZero() || now.Sub(inst.CreatedAt) < minAge:
		return KeepYoung
	case inst.State == provider.StateTerminated:
		return KeepTerminating
	}
	return Orphan
}
