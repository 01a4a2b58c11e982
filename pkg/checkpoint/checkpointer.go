package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// Store is the lease store as the checkpointer uses it (*lease.Store).
type Store interface {
	// StateInto fills st (reusing its slices) with the durable state and
	// returns Changes at the same instant.
	StateInto(st *lease.State) uint64
	// Changes grows with every change State would show.
	Changes() uint64
	// Restore loads a state into an empty store.
	Restore(lease.State) error
	// EndLeasesOfAbsentProxies ends the restored leases of proxies the
	// informer did not bring back.
	EndLeasesOfAbsentProxies() int
}

// Secret keys.
const (
	keyPayload    = "checkpoint.json.gz"
	keySHA256     = "sha256"
	keyShards     = "shards"
	keyGeneration = "generation"
)

// shardBytes bounds the payload one Secret carries (a Secret's data must
// stay under 1 MiB).
const shardBytes = 700 << 10

// finalWriteTimeout bounds the wait for the lease servers before the last
// checkpoint, and each attempt to write it.
const finalWriteTimeout = 10 * time.Second

// finalWriteDeadline bounds the retries of the last checkpoint: a replica
// that lost its leadership in a kube-apiserver outage keeps trying until the
// API answers again (unless another replica fenced it first).
const finalWriteDeadline = 2 * time.Minute

// Annotations of the index Secret: who wrote it (a process, see
// Deps.Identity), and whether that was its last write (it stopped serving).
const (
	annWriter = "leasing.crawl.example.com/checkpoint-writer"
	annFinal  = "leasing.crawl.example.com/checkpoint-final"
)

// ErrFenced: another replica took the leases over (it wrote the checkpoint
// since this one last did); this one must stop serving and writing.
var ErrFenced = errors.New("another replica took the leases over")

// IsFenced reports whether err is (or wraps) ErrFenced.
func IsFenced(err error) bool { return errors.Is(err, ErrFenced) }

// Deps are what a Checkpointer works with.
type Deps struct {
	// Secrets reads and writes the checkpoint (an uncached client).
	Secrets corev1client.SecretsGetter
	Store   Store
	// Codec encodes the API metadata of leases (nil: leases carry none).
	Codec ExtraCodec
	// Clock paces the writes; nil means the real clock.
	Clock clock.WithTicker
	// StopFirst are closed once each lease server has stopped taking
	// requests: the last checkpoint waits for them (at most
	// finalWriteTimeout), so that it holds every change they made.
	StopFirst []<-chan struct{}
	// Identity names this process in the checkpoint it writes (default: the
	// host name, the pid and a random suffix): a write that finds another
	// writer's checkpoint was fenced.
	Identity string
}

// Checkpointer loads the lease store from its Secrets when this replica
// takes the leases over and writes them while it serves them (Load, then
// Start, both from leasing.Takeover on the leader: a standby never writes).
type Checkpointer struct {
	opts  Options
	deps  Deps
	clock clock.WithTicker

	mu sync.Mutex
	// rvBase is the aggregated API's resourceVersion base: loaded, or set
	// by the first RVBase call.
	rvBase uint64
	// index is the index Secret as last read or written (its
	// resourceVersion guards the next write).
	index       *corev1.Secret
	lastPayload []byte
	lastChanges uint64
	generation  uint64
	writes      int
	enc         encoder
	// state is reused from one write to the next.
	state lease.State
	// fenced: another replica wrote since this one; it writes no more.
	fenced bool
}

// New validates opts.
func New(opts Options, deps Deps) (*Checkpointer, error) {
	if !opts.Enabled() {
		return nil, errors.New("checkpoint: --lease-checkpoint-secret is unset; do not build a Checkpointer")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if deps.Secrets == nil || deps.Store == nil {
		return nil, errors.New("checkpoint: Deps.Secrets and Deps.Store are required")
	}
	clk := deps.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	if deps.Identity == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥1.24)
		deps.Identity = fmt.Sprintf("%s_%d_%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	return &Checkpointer{opts: opts, deps: deps, clock: clk}, nil
}

// RVBase is the aggregated API's resourceVersion base: the checkpoint's when
// one was loaded, else def (the first caller's; the start time), kept from
// then on and written with every checkpoint.
func (c *Checkpointer) RVBase(def uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rvBase == 0 {
		c.rvBase = def
	}
	return c.rvBase
}

// Load reads the checkpoint and restores it into the store; run it before
// the store is fed or any server answers. No checkpoint is not an error
// (loaded false). An unreadable one is logged and skipped (loaded false, the
// error returned wraps ErrCorrupt only for the caller's log): starting empty
// loses what a restart without checkpoints always lost, refusing to start
// would lose the fleet.
func (c *Checkpointer) Load(ctx context.Context) (loaded bool, err error) {
	secrets := c.deps.Secrets.Secrets(c.opts.Namespace)
	index, err := secrets.Get(ctx, c.opts.SecretName, metav1.GetOptions{})
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
	if err := c.deps.Store.Restore(st); err != nil {
		return false, fmt.Errorf("restoring the lease checkpoint: %w", err)
	}
	c.mu.Lock()
	c.rvBase = rvBase
	c.lastPayload = payload
	c.lastChanges = c.deps.Store.Changes()
	c.mu.Unlock()
	log.FromContext(ctx).Info("lease checkpoint loaded", "secret", c.opts.Namespace+"/"+c.opts.SecretName,
		"leases", len(st.Leases), "cooldowns", len(st.Cooldowns), "ended", len(st.Ended), "revision", st.Revision)
	return true, nil
}

// TakeOver is Load on the replica taking the leases over (nothing served
// yet), after fencing the replica that served before (see fence): a corrupt
// checkpoint is logged and skipped (the next write
// overwrites it); once waitForSync says the Proxy informer has synced, the
// restored leases of proxies deleted meanwhile end; restored (nil: no
// aggregated API) gets the resourceVersion base to continue from, the
// checkpoint's or, without one, now.
func (c *Checkpointer) TakeOver(ctx context.Context, waitForSync func(context.Context) bool, restored func(rvBase uint64)) error {
	logger := log.FromContext(ctx)
	if err := c.fence(ctx); err != nil {
		return err
	}
	loaded, err := c.Load(ctx)
	if IsCorrupt(err) {
		logger.Error(err, "lease checkpoint unreadable; serving without it (it is overwritten by the next checkpoint)")
	} else if err != nil {
		return err
	}
	if loaded {
		if !waitForSync(ctx) {
			return ctx.Err()
		}
		if n := c.deps.Store.EndLeasesOfAbsentProxies(); n > 0 {
			logger.Info("restored leases of deleted proxies ended", "leases", n)
		}
	}
	if restored != nil {
		restored(c.RVBase(uint64(c.clock.Now().UnixMicro())))
	}
	return nil
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
		s, err := c.deps.Secrets.Secrets(c.opts.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("%w: shard %s: %v", ErrCorrupt, name, err)
		}
		payload = append(payload, s.Data[keyPayload]...)
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != string(index.Data[keySHA256]) {
		return nil, fmt.Errorf("%w: digest mismatch (a shard is missing or changed)", ErrCorrupt)
	}
	return payload, nil
}

func shardName(name, generation string, i int) string {
	return fmt.Sprintf("%s-%s-%d", name, generation, i)
}

// Start writes a checkpoint at most every Interval while the store changes,
// and a last one when ctx ends, after the lease servers stopped
// (Deps.StopFirst). A failed write is logged and retried at the next tick;
// a fenced one (another replica took over) ends Start with ErrFenced.
func (c *Checkpointer) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("lease-checkpoint")
	ctx = log.IntoContext(ctx, logger)
	ticker := c.clock.NewTicker(c.opts.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return c.final(ctx)
		case <-ticker.C():
		}
		if err := c.WriteIfChanged(ctx); IsFenced(err) {
			return fmt.Errorf("stopped serving leases: %w", err)
		} else if err != nil {
			logger.Error(err, "writing the lease checkpoint; retrying")
		}
	}
}

// final waits for the servers and writes the last checkpoint.
func (c *Checkpointer) final(ctx context.Context) error {
	logger := log.FromContext(ctx)
	deadline := c.clock.NewTimer(finalWriteTimeout)
	defer deadline.Stop()
	c.mu.Lock()
	stopFirst := c.deps.StopFirst
	c.mu.Unlock()
	for _, ch := range stopFirst {
		select {
		case <-ch:
		case <-deadline.C():
			logger.Info("lease servers still running after the shutdown timeout; writing the last checkpoint anyway", "timeout", finalWriteTimeout)
		}
	}
	// The last write is marked final, whether or not anything changed, so
	// that the next leader need not wait for it. It is retried until it
	// lands (a kube-apiserver outage), another replica fenced this one, or
	// finalWriteDeadline.
	giveUp := c.clock.Now().Add(finalWriteDeadline)
	for attempt := 1; ; attempt++ {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteTimeout)
		err := c.write(wctx, true)
		cancel()
		switch {
		case err == nil:
			logger.Info("last lease checkpoint written", "attempts", attempt)
			return nil
		case IsFenced(err):
			return fmt.Errorf("writing the last lease checkpoint: %w (what changed since its last checkpoint is lost)", err)
		case !c.clock.Now().Before(giveUp):
			return fmt.Errorf("writing the last lease checkpoint: gave up after %s: %w", finalWriteDeadline, err)
		}
		if attempt == 1 {
			logger.Error(err, "writing the last lease checkpoint; retrying until kube-apiserver answers", "deadline", finalWriteDeadline)
		}
		select {
		case <-c.clock.After(250 * time.Millisecond):
		case <-context.WithoutCancel(ctx).Done():
		}
	}
}

// WriteIfChanged writes the store's state unless nothing changed since the
// last write (or load).
func (c *Checkpointer) WriteIfChanged(ctx context.Context) error { return c.write(ctx, false) }

// write writes the store's state; final marks it the last (written even
// when nothing changed).
func (c *Checkpointer) write(ctx context.Context, final bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fenced {
		return ErrFenced
	}
	if c.index != nil && c.deps.Store.Changes() == c.lastChanges {
		if final {
			return c.markFinalLocked(ctx)
		}
		return nil
	}
	changes := c.deps.Store.StateInto(&c.state)
	st := &c.state
	if c.rvBase == 0 {
		c.rvBase = uint64(c.clock.Now().UnixMicro())
	}
	payload, err := c.enc.encode(st, c.rvBase, c.deps.Codec)
	if err != nil {
		return err
	}
	if c.index != nil && bytes.Equal(payload, c.lastPayload) {
		c.lastChanges = changes
		if final {
			return c.markFinalLocked(ctx)
		}
		return nil
	}
	if err := c.writeLocked(ctx, payload, final); err != nil {
		return err
	}
	// payload is the encoder's buffer: keep a copy to compare the next one.
	c.lastPayload, c.lastChanges = append(c.lastPayload[:0], payload...), changes
	c.writes++
	return nil
}

// markFinalLocked marks the checkpoint as written final without writing it
// again (nothing changed since): an update of its annotations only.
func (c *Checkpointer) markFinalLocked(ctx context.Context) error {
	next := c.index.DeepCopy()
	next.Annotations = map[string]string{annWriter: c.deps.Identity, annFinal: "true"}
	written, err := c.deps.Secrets.Secrets(c.opts.Namespace).Update(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		if ferr := c.rereadLocked(ctx); ferr != nil {
			return ferr
		}
	}
	if err != nil {
		return fmt.Errorf("marking lease checkpoint %s/%s final: %w", c.opts.Namespace, c.opts.SecretName, err)
	}
	c.index = written
	return nil
}

// rereadLocked follows an index Secret changed behind this writer's back.
// Changed by another replica (it names itself): fenced, ErrFenced, this one
// writes no more. Else (edited, deleted by hand) it is read again, and the
// next write goes on from it.
func (c *Checkpointer) rereadLocked(ctx context.Context) error {
	c.index = nil
	cur, err := c.deps.Secrets.Secrets(c.opts.Namespace).Get(ctx, c.opts.SecretName, metav1.GetOptions{})
	if err != nil {
		return nil // deleted (the next write creates it) or unreadable (retried)
	}
	if w := cur.Annotations[annWriter]; w != "" && w != c.deps.Identity {
		c.fenced = true
		return fmt.Errorf("writing lease checkpoint %s/%s: %w (%s wrote it)", c.opts.Namespace, c.opts.SecretName, ErrFenced, w)
	}
	c.index = cur
	c.generation, _ = strconv.ParseUint(string(cur.Data[keyGeneration]), 10, 64)
	return nil
}

// Writes counts the checkpoints written by this process (a final mark of
// an unchanged one is not counted).
func (c *Checkpointer) Writes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// writeLocked writes payload: extra shards first (under a new generation),
// then the index Secret that names them, then the previous generation's
// extra shards are deleted. A reader sees the old checkpoint or the new one,
// never a mix. One write when the payload fits in one Secret.
func (c *Checkpointer) writeLocked(ctx context.Context, payload []byte, final bool) error {
	secrets := c.deps.Secrets.Secrets(c.opts.Namespace)
	oldGen, oldShards := c.generation, 1
	if c.index != nil {
		oldShards, _ = strconv.Atoi(string(c.index.Data[keyShards]))
	}
	gen := oldGen + 1
	genStr := strconv.FormatUint(gen, 10)
	var chunks [][]byte
	for rest := payload; len(rest) > 0 || len(chunks) == 0; {
		n := min(len(rest), shardBytes)
		chunks = append(chunks, rest[:n])
		rest = rest[n:]
	}
	labels := map[string]string{"app.kubernetes.io/managed-by": "proxy-operator", "app.kubernetes.io/component": "lease-checkpoint"}
	for i := 1; i < len(chunks); i++ {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: shardName(c.opts.SecretName, genStr, i), Namespace: c.opts.Namespace, Labels: labels},
			Data: map[string][]byte{keyPayload: chunks[i]}}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("writing lease checkpoint shard %s: %w", s.Name, err)
		}
	}
	sum := sha256.Sum256(payload)
	data := map[string][]byte{
		keyPayload:    chunks[0],
		keySHA256:     []byte(hex.EncodeToString(sum[:])),
		keyShards:     []byte(strconv.Itoa(len(chunks))),
		keyGeneration: []byte(genStr),
	}
	annotations := map[string]string{annWriter: c.deps.Identity}
	if final {
		annotations[annFinal] = "true"
	}
	var written *corev1.Secret
	var err error
	if c.index == nil {
		written, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.opts.SecretName, Namespace: c.opts.Namespace,
			Labels: labels, Annotations: annotations}, Data: data}, metav1.CreateOptions{})
	} else {
		next := c.index.DeepCopy()
		next.Data = data
		next.Annotations = annotations
		written, err = secrets.Update(ctx, next, metav1.UpdateOptions{})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) {
		if ferr := c.rereadLocked(ctx); ferr != nil {
			return ferr
		}
	}
	if err != nil {
		return fmt.Errorf("writing lease checkpoint %s/%s: %w", c.opts.Namespace, c.opts.SecretName, err)
	}
	c.index, c.generation = written, gen
	oldStr := strconv.FormatUint(oldGen, 10)
	for i := 1; i < oldShards; i++ {
		if err := secrets.Delete(ctx, shardName(c.opts.SecretName, oldStr, i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Error(err, "deleting an old lease checkpoint shard", "shard", shardName(c.opts.SecretName, oldStr, i))
		}
	}
	return nil
}

// FinalAfter adds channels the last checkpoint waits for (each lease
// server's Stopped); call it before Start.
func (c *Checkpointer) FinalAfter(chs ...<-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deps.StopFirst = append(c.deps.StopFirst, chs...)
}
