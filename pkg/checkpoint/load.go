package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// Load reads the checkpoint and restores it into the store; run it before
// the store is fed or any server answers. No checkpoint is not an error
// (loaded false). A checkpoint proven unreadable (a digest mismatch, a shard
// that is really gone, a document this operator cannot decode) is an error
// wrapping ErrCorrupt; any other error (a timeout, a 5xx, kube-apiserver
// unreachable) says nothing about the checkpoint: TakeOver retries it.
func (c *Checkpointer) Load(ctx context.Context) (loaded bool, err error) {
	secrets := c.deps.Secrets.Secrets(c.opts.Namespace)
	index, err := readRetried(ctx, c, func() (*corev1.Secret, error) { return secrets.Get(ctx, c.opts.SecretName, metav1.GetOptions{}) })
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading lease checkpoint %s/%s: %w", c.opts.Namespace, c.opts.SecretName, err)
	}
	c.mu.Lock()
	c.index = index
	c.generation, _ = strconv.ParseUint(string(index.Data[keyGeneration]), 10, 64)
	c.mu.Unlock()
	payload, err := c.readPayload(ctx, index)
	if err != nil {
		return false, err
	}
	st, rvBase, err := decode(payload, c.deps.Codec)
	if err != nil {
		return false, err
	}
	journal, err := strconv.Atoi(string(index.Data[keyJournal]))
	if _, ok := index.Data[keyJournal]; ok && (err != nil || journal < 0 || journal > maxJournalSegments) {
		return false, fmt.Errorf("%w: journal %q", ErrCorrupt, index.Data[keyJournal])
	}
	deltas, err := c.readJournal(ctx, string(index.Data[keyGeneration]), journal)
	if err != nil {
		return false, err
	}
	replay(&st, deltas)
	if err := c.deps.Store.Restore(st); errors.Is(err, lease.ErrNotEmpty) {
		return false, fmt.Errorf("restoring the lease checkpoint: %w", err)
	} else if err != nil {
		return false, fmt.Errorf("%w: restoring it: %v", ErrCorrupt, err)
	}
	c.mu.Lock()
	c.rvBase = rvBase
	// The first write after a load is a snapshot: a generation of this
	// writer's own, after which what a killed or fenced writer left of the
	// last one is deleted (an index of the release before the journal,
	// which carries its payload, is replaced by this layout's).
	c.journaling, c.journal = false, journal
	c.lastChanges = c.deps.Store.Changes()
	c.mu.Unlock()
	log.FromContext(ctx).Info("lease checkpoint loaded", "secret", c.opts.Namespace+"/"+c.opts.SecretName,
		"leases", len(st.Leases), "cooldowns", len(st.Cooldowns), "ended", len(st.Ended), "revision", st.Revision, "journalSegments", journal)
	return true, nil
}

// Backoff of TakeOver's retries while the checkpoint cannot be read.
const (
	loadRetryFirst = 100 * time.Millisecond
	loadRetryMax   = 5 * time.Second
)

// TakeOver is Load on the replica taking the leases over (nothing served
// yet), after fencing the replica that served before (see fence). An error
// that says nothing about the checkpoint (kube-apiserver unreachable, a
// timeout, a 5xx) is retried with backoff (up to loadRetryMax apart) until
// ctx ends, which is when this replica stops leading: a replica never
// serves an empty store because it could not read a checkpoint that is
// there. Only a checkpoint proven corrupt is skipped (the next write
// overwrites it), and then the store takes back any lease whose signed ID
// proves it (lease.Store.StateLost): the checkpoint held them all. Then
// leftover shards of abandoned writes are deleted; once waitForSync says
// the Proxy informer has synced, the restored leases of proxies deleted
// meanwhile end; restored (nil: no aggregated API) gets the resourceVersion
// base to continue from, the checkpoint's or, without one, now.
func (c *Checkpointer) TakeOver(ctx context.Context, waitForSync func(context.Context) bool, restored func(rvBase uint64)) error {
	logger := log.FromContext(ctx)
	var loaded bool
	err := c.retry(ctx, "taking over the lease checkpoint", func() error {
		if err := c.fence(ctx); err != nil {
			return err
		}
		var err error
		loaded, err = c.Load(ctx)
		return err
	})
	switch {
	case IsCorrupt(err):
		logger.Error(err, "lease checkpoint corrupt; serving without it (it is overwritten by the next checkpoint; leases whose signed IDs prove them can be taken back)")
		c.deps.Store.StateLost()
	case err != nil:
		return err
	}
	c.deleteLeftovers(ctx)
	if loaded {
		if !waitForSync(ctx) {
			return ctx.Err()
		}
		if n := c.deps.Store.EndLeasesOfAbsentProxies(); n > 0 {
			logger.Info("restored leases of deleted proxies ended", "leases", n)
		}
	}
	c.current(c.clock.Now())
	if restored != nil {
		restored(c.RVBase(uint64(c.clock.Now().UnixMicro())))
	}
	return nil
}

// retry runs f until it succeeds, fails for good (corrupt, fenced) or ctx
// ends, waiting between attempts with exponential backoff.
func (c *Checkpointer) retry(ctx context.Context, what string, f func() error) error {
	wait := loadRetryFirst
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || IsCorrupt(err) || IsFenced(err) || errors.Is(err, lease.ErrNotEmpty) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		}
		log.FromContext(ctx).Error(err, what+"; retrying, not serving meanwhile", "attempt", attempt, "retryIn", wait)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-c.clock.After(wait):
		}
		wait = min(2*wait, loadRetryMax)
	}
}

// fence makes the checkpoint this replica's before it is loaded: the index
// Secret is rewritten as it is, naming this process as its writer, under
// its resourceVersion. From then on a write by the replica that served
// before fails (ErrFenced), so nothing it still does can be lost silently
// or mixed in. When that replica did not mark its last checkpoint final (it
// crashed, or lost its leadership in a kube-apiserver outage and is still
// trying to write), fence first waits up to takeoverGrace for that last
// write: after an outage it lands as soon as the API answers, and nothing
// the old leader granted is lost.
func (c *Checkpointer) fence(ctx context.Context) error {
	secrets := c.deps.Secrets.Secrets(c.opts.Namespace)
	waited := false
	for attempt := 0; ; attempt++ {
		index, err := secrets.Get(ctx, c.opts.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // nothing to fence: the first write creates it
		}
		if err != nil {
			return fmt.Errorf("reading lease checkpoint %s/%s: %w", c.opts.Namespace, c.opts.SecretName, err)
		}
		if !waited && index.Annotations[annFinal] != "true" && index.Annotations[annWriter] != c.deps.Identity {
			waited = true
			if index, err = c.awaitLastWrite(ctx, index); err != nil {
				return err
			}
		}
		next := index.DeepCopy()
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Annotations[annWriter] = c.deps.Identity
		delete(next.Annotations, annFinal)
		_, err = secrets.Update(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt < 5 {
			continue // its last write landed meanwhile: fence that one
		}
		if err != nil {
			return fmt.Errorf("taking over lease checkpoint %s/%s: %w", c.opts.Namespace, c.opts.SecretName, err)
		}
		log.FromContext(ctx).Info("lease checkpoint taken over", "previousWriter", index.Annotations[annWriter],
			"final", index.Annotations[annFinal] == "true")
		return nil
	}
}

// takeoverGrace is how long fence waits for a last write that was not
// marked final: one interval, at least a second. A leader cut off from
// kube-apiserver retries its last write every 250ms, so it lands within
// that once the API answers; after a crash it is what the takeover costs.
func (c *Checkpointer) takeoverGrace() time.Duration { return max(time.Second, c.opts.Interval) }

// awaitLastWrite polls the index Secret until it changes or takeoverGrace
// passes, and returns it as it is then.
func (c *Checkpointer) awaitLastWrite(ctx context.Context, index *corev1.Secret) (*corev1.Secret, error) {
	secrets := c.deps.Secrets.Secrets(c.opts.Namespace)
	deadline := c.clock.Now().Add(c.takeoverGrace())
	for c.clock.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.clock.After(100 * time.Millisecond):
		}
		cur, err := secrets.Get(ctx, c.opts.SecretName, metav1.GetOptions{})
		if err == nil && cur.ResourceVersion != index.ResourceVersion {
			return cur, nil
		}
	}
	return index, nil
}

// Retries of one read within a load attempt.
const (
	readAttempts   = 3
	readRetryFirst = 50 * time.Millisecond
)

// readRetried runs read again, up to readAttempts times in all, while it
// fails with an error that says nothing about the checkpoint (a timeout, a
// 5xx): a blip costs one read again, not the whole load (a snapshot of 28
// Secrets at 100,000 leases is some 30 reads, and at one fault in five a
// load that reads them all succeeded once in some 800 tries). A read is
// idempotent, and the digests still check the whole.
func readRetried[T any](ctx context.Context, c *Checkpointer, read func() (T, error)) (T, error) {
	wait := readRetryFirst
	for attempt := 1; ; attempt++ {
		v, err := read()
		if err == nil || attempt == readAttempts || apierrors.IsNotFound(err) || refusedForGood(err) || ctx.Err() != nil {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-c.clock.After(wait):
		}
		wait *= 2
	}
}

// readPayload joins the index Secret's shard with its extra shards and
// checks the whole against its digest.
func (c *Checkpointer) readPayload(ctx context.Context, index *corev1.Secret) ([]byte, error) {
	shards, err := strconv.Atoi(string(index.Data[keyShards]))
	if err != nil || shards < 1 || shards > 1000 {
		return nil, fmt.Errorf("%w: shard count %q", ErrCorrupt, index.Data[keyShards])
	}
	payload := bytes.Clone(index.Data[keyPayload])
	gen := string(index.Data[keyGeneration])
	for i := 1; i < shards; i++ {
		name := shardName(c.opts.SecretName, gen, i)
		s, err := readRetried(ctx, c, func() (*corev1.Secret, error) {
			return c.deps.Secrets.Secrets(c.opts.Namespace).Get(ctx, name, metav1.GetOptions{})
		})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: shard %s is missing", ErrCorrupt, name)
		}
		if err != nil {
			return nil, fmt.Errorf("reading lease checkpoint shard %s: %w", name, err)
		}
		payload = append(payload, s.Data[keyPayload]...)
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != string(index.Data[keySHA256]) {
		return nil, fmt.Errorf("%w: digest mismatch (a shard is missing or changed)", ErrCorrupt)
	}
	return payload, nil
}
