package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// AddFlags registers the intervals' flags on fs.
func (i *Intervals) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&i.ProvisioningPoll, "provisioning-poll-interval", i.ProvisioningPoll, "How often an instance being created is polled.")
	fs.DurationVar(&i.DeletionPoll, "deletion-poll-interval", i.DeletionPoll, "How often an instance being deleted is polled.")
	fs.DurationVar(&i.DriftPoll, "drift-poll-interval", i.DriftPoll, "How often a running instance is re-checked.")
	fs.DurationVar(&i.QuotaRetry, "quota-retry-interval", i.QuotaRetry, "Wait after the provider reports exhausted quota.")
	fs.DurationVar(&i.RequeueNow, "requeue-now-interval", i.RequeueNow, "Short delay standing in for an immediate requeue.")
	fs.DurationVar(&i.CreateRetry, "create-retry-interval", i.CreateRetry, "First wait after a create the provider accepted and then failed (doubles per failure in a row, up to --quota-retry-interval).")
}

// Validate reports every interval that is not positive.
func (i *Intervals) Validate() error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--provisioning-poll-interval", i.ProvisioningPoll},
		{"--deletion-poll-interval", i.DeletionPoll},
		{"--drift-poll-interval", i.DriftPoll},
		{"--quota-retry-interval", i.QuotaRetry},
		{"--requeue-now-interval", i.RequeueNow},
		{"--create-retry-interval", i.CreateRetry},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %s", d.flag, d.v))
		}
	}
	return errors.Join(errs...)
}

// CacheOptions are the manager's cache as the reconciler needs it
// (CacheByObject), restricted to namespaces when any are given.
func CacheOptions(namespaces []string) cache.Options {
	c := cache.Options{ByObject: CacheByObject()}
	if len(namespaces) > 0 {
		c.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			c.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return c
}

// CacheSynced is a readiness check that passes once c's informers have
// synced: before that the reconciler and the proxies collector would see an
// empty fleet.
func CacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("informer caches not synced")
		}
		return nil
	}
}
