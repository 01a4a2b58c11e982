package checkpoint

import (
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
	// StateInto fills st (reusing its slices) with the durable state, its
	// leases in any order, and returns Changes at the same instant.
	StateInto(st *lease.State) uint64
	// Changes grows with every change State would show.
	Changes() uint64
	// Restore loads a state into an empty store.
	Restore(lease.State) error
	// EndLeasesOfAbsentProxies ends the restored leases of proxies the
	// informer did not bring back.
	EndLeasesOfAbsentProxies() int
	// StateLost says, instead of Restore, that the state could not be read:
	// leases whose signed IDs prove them may be taken back.
	StateLost()
}

// Recorder observes the writer; pkg/metrics satisfies it. Its methods must
// not block.
type Recorder interface {
	// LeaseCheckpointWrite counts one write by result (ResultWritten,
	// ResultFailed, ResultFenced).
	LeaseCheckpointWrite(result string)
	// LeaseCheckpointCurrent says the stored checkpoint holds the store's
	// state as of at (written then, or found unchanged); the zero time says
	// this replica no longer writes it.
	LeaseCheckpointCurrent(at time.Time)
}

// Results of LeaseCheckpointWrite.
const (
	ResultWritten = "written"
	ResultFailed  = "failed"
	ResultFenced  = "fenced"
)

// Results lists every LeaseCheckpointWrite result.
func Results() []string { return []string{ResultWritten, ResultFailed, ResultFenced} }

type nopRecorder struct{}

func (nopRecorder) LeaseCheckpointWrite(string)      {}
func (nopRecorder) LeaseCheckpointCurrent(time.Time) {}

// Secret keys.
const (
	keyPayload    = "checkpoint.json.gz"
	keySHA256     = "sha256"
	keyShards     = "shards"
	keyGeneration = "generation"
	// keyJournal is the last journal segment the index names.
	keyJournal = "journal"
)

// shardBytes bounds the payload one Secret carries: as JSON (base64) with
// its metadata, a Secret stays under 512 KiB (kube-apiserver refuses 1.5
// MiB; etcd and every Secret watcher get each object whole).
const shardBytes = 360 << 10

// finalWriteTimeout bounds the wait for the lease servers before the last
// checkpoint, and each attempt to write it.
const finalWriteTimeout = 10 * time.Second

// finalWriteDeadline bounds the retries of the last checkpoint: a replica
// that lost its leadership in a kube-apiserver outage keeps trying until the
// API answers again (unless another replica fenced it first).
const finalWriteDeadline = 2 * time.Minute

// FinalWriteWorstCase is the longest the last checkpoint may take after
// Start's context ends: the wait for the lease servers, the retries, and the
// last attempt. A process's shutdown timeout and a pod's
// terminationGracePeriodSeconds must exceed it, or the last write is cut.
const FinalWriteWorstCase = finalWriteTimeout + finalWriteDeadline + finalWriteTimeout

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
	// Recorder observes the writes (optional).
	Recorder Recorder
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
	index *corev1.Secret
	// lastChanges is the store's Changes as of the last write (or load).
	lastChanges uint64
	generation  uint64
	// journaling: the index is of this layout and base holds what the
	// checkpoint stores, so a change can go into the journal; off after a
	// journal write failed (the next write is a snapshot).
	journaling bool
	// journal is the last journal segment the index names (0: none since
	// the snapshot); journalBytes their size, snapshotBytes the snapshot's.
	journal                     int
	journalBytes, snapshotBytes int
	base                        baseline
	delta                       delta
	// triedGen is the highest generation this writer tried or saw shards
	// of: the next write takes a later one.
	triedGen uint64
	// leftovers: shards of abandoned generations may exist (an attempt
	// failed, or a delete did); the next write lists and deletes them.
	leftovers bool
	enc       encoder
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
	if deps.Recorder == nil {
		deps.Recorder = nopRecorder{}
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

// Start writes a checkpoint at most every Interval (and after a write
// longer than that, at most half the time) while the store changes,
// and a last one when ctx ends, after the lease servers stopped
// (Deps.StopFirst). A failed write is logged and retried at the next tick;
// a fenced one (another replica took over) ends Start with ErrFenced.
func (c *Checkpointer) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("lease-checkpoint")
	ctx = log.IntoContext(ctx, logger)
	ticker := c.clock.NewTicker(c.opts.Interval)
	defer ticker.Stop()
	// From here on the gauge is this writer's; it says no more once it
	// stops writing.
	defer c.current(time.Time{})
	for {
		select {
		case <-ctx.Done():
			return c.final(ctx)
		case <-ticker.C():
		}
		began := c.clock.Now()
		if err := c.WriteIfChanged(ctx); IsFenced(err) {
			return fmt.Errorf("stopped serving leases: %w", err)
		} else if err != nil {
			logger.Error(err, "writing the lease checkpoint; retrying")
		}
		// A write that took longer than the interval (some 2 s at 100,000
		// leases) is followed by a pause as long: the writer, and the
		// kube-apiserver and etcd that store its Secrets, spend at most
		// half their time on checkpoints.
		if took := c.clock.Since(began); took > c.opts.Interval {
			select {
			case <-ctx.Done():
				return c.final(ctx)
			case <-c.clock.After(took):
			}
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
	// lands (a kube-apiserver outage), another replica fenced this one,
	// kube-apiserver refuses it for good (refusedForGood), or
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
		case refusedForGood(err):
			return fmt.Errorf("writing the last lease checkpoint: refused, not retried: %w", err)
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

// refusedForGood reports whether kube-apiserver answered the last checkpoint
// with a refusal that no wait within a shutdown changes: its namespace is
// being deleted (an uninstall: creates are refused, and the checkpoint goes
// with the namespace), or this replica may no longer write Secrets there (its
// ServiceAccount, token or Role removed). Retrying those held a stopping pod
// for finalWriteDeadline, which an uninstall waited out. An outage (no answer,
// timeouts, 5xx, 429) is still retried.
func refusedForGood(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
}

// WriteIfChanged writes the store's state unless nothing changed since the
// last write (or load).
func (c *Checkpointer) WriteIfChanged(ctx context.Context) error { return c.write(ctx, false) }

// current tells the Recorder the checkpoint holds the store's state as of at.
func (c *Checkpointer) current(at time.Time) { c.deps.Recorder.LeaseCheckpointCurrent(at) }

// write writes the store's state; final marks it the last (written even
// when nothing changed).
func (c *Checkpointer) write(ctx context.Context, final bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	wrote, err := c.writeIfNeededLocked(ctx, final)
	switch {
	case IsFenced(err):
		c.deps.Recorder.LeaseCheckpointWrite(ResultFenced)
	case err != nil:
		c.deps.Recorder.LeaseCheckpointWrite(ResultFailed)
	case wrote:
		c.deps.Recorder.LeaseCheckpointWrite(ResultWritten)
		c.current(now)
	default:
		c.current(now)
	}
	return err
}

// writeIfNeededLocked is write under c.mu; wrote says whether a new
// checkpoint was written. What changed goes into the journal while it
// fits; the first write, the last one (final: a successor, or an older
// release, reads one snapshot) and one the journal outgrew write a
// snapshot.
func (c *Checkpointer) writeIfNeededLocked(ctx context.Context, final bool) (wrote bool, err error) {
	if c.fenced {
		return false, ErrFenced
	}
	if c.index != nil && c.deps.Store.Changes() == c.lastChanges && (!final || c.journal == 0) {
		return false, c.nothingNewLocked(ctx, final)
	}
	changes := c.deps.Store.StateInto(&c.state)
	if c.rvBase == 0 {
		c.rvBase = uint64(c.clock.Now().UnixMicro())
	}
	// The diff costs a look-up per lease: not made when the store changed
	// more than a segment could hold (each change shows in at least one
	// record for every two revisions: a lease granted and released within
	// the interval is one ended lease).
	if c.journaling && c.mayFit((changes-c.lastChanges)/2) {
		c.base.diff(&c.state, c.state.TakenAt, &c.delta)
		if c.base.empty(&c.delta) && (!final || c.journal == 0) {
			c.lastChanges = changes
			return false, c.nothingNewLocked(ctx, final)
		}
		if !final {
			appended, err := c.appendLocked(ctx)
			if err != nil {
				return false, err
			}
			if appended {
				c.lastChanges = changes
				return true, nil
			}
		}
	}
	payload, err := c.enc.encode(&c.state, c.rvBase, c.deps.Codec)
	if err != nil {
		return false, err
	}
	if err := c.writeLocked(ctx, payload, sha256.Sum256(payload), final); err != nil {
		return false, err
	}
	c.base.reset(&c.state)
	c.journaling, c.journal, c.journalBytes, c.snapshotBytes = true, 0, 0, len(payload)
	c.lastChanges = changes
	return true, nil
}

// nothingNewLocked is a write that finds nothing new to write: the last
// one (final) marks the checkpoint final, so that the next leader need not
// wait for it.
func (c *Checkpointer) nothingNewLocked(ctx context.Context, final bool) error {
	if final {
		return c.markFinalLocked(ctx)
	}
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
	c.index, c.journaling = cur, false
	c.generation, _ = strconv.ParseUint(string(cur.Data[keyGeneration]), 10, 64)
	return nil
}

// FinalAfter adds channels the last checkpoint waits for (each lease
// server's Stopped); call it before Start.
func (c *Checkpointer) FinalAfter(chs ...<-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deps.StopFirst = append(c.deps.StopFirst, chs...)
}
