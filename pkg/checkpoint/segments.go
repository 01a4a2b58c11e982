package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// labelJournal marks a journal segment with the generation of the snapshot
// it follows: a load lists them in one call.
const labelJournal = "leasing.crawl.example.com/checkpoint-journal"

// minChangeBytes is less than any one change takes in a segment,
// compressed (a deleted lease's ID, at the least).
const minChangeBytes = 8

// mayFit reports whether a segment of records changes might still go into
// the journal; false: they surely cannot fit, neither in one Secret nor
// within the snapshot's size, and are a snapshot without being diffed or
// encoded.
func (c *Checkpointer) mayFit(records uint64) bool {
	return records*minChangeBytes <= uint64(min(shardBytes, c.snapshotBytes-c.journalBytes))
}

// appendLocked writes c.delta as the journal's next segment: a Secret of
// its own, created, then the index updated to name it (under its
// resourceVersion: the commit, and what fences a replaced writer). It
// reports false without an error when the change belongs in a snapshot
// instead: the journal is full (Options.JournalSegments), leftovers of
// failed writes wait to be deleted, the journal would outgrow the snapshot
// (so a takeover reads at most about twice the snapshot, and a snapshot
// costs at most what the journal did), or a segment of that name exists (a
// fenced writer's, or this one's whose commit failed). After any failure
// the next write is a snapshot.
func (c *Checkpointer) appendLocked(ctx context.Context) (bool, error) {
	if c.journal >= c.opts.JournalSegments || c.leftovers {
		return false, nil // a snapshot, which also deletes the leftovers
	}
	if !c.mayFit(uint64(c.delta.changes())) {
		return false, nil
	}
	seg, err := c.enc.encodeDelta(&c.delta, c.rvBase, c.deps.Codec)
	if err != nil {
		return false, err
	}
	if len(seg) > shardBytes || c.journalBytes+len(seg) > c.snapshotBytes {
		return false, nil
	}
	secrets := c.deps.Secrets.Secrets(c.opts.Namespace)
	seq := c.journal + 1
	genStr := strconv.FormatUint(c.generation, 10)
	sum := sha256.Sum256(seg)
	labels := componentLabels()
	labels[labelJournal] = genStr
	name := segmentName(c.opts.SecretName, genStr, seq)
	_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.opts.Namespace, Labels: labels},
		Data: map[string][]byte{keyPayload: seg, keySHA256: []byte(hex.EncodeToString(sum[:]))}}, metav1.CreateOptions{})
	if err != nil {
		c.journaling, c.leftovers = false, true
		if apierrors.IsAlreadyExists(err) {
			log.FromContext(ctx).Info("lease checkpoint journal segment exists already; writing a snapshot", "segment", name)
			return false, nil
		}
		return false, fmt.Errorf("writing lease checkpoint journal segment %s: %w", name, err)
	}
	next := c.index.DeepCopy()
	next.Data[keyJournal] = []byte(strconv.Itoa(seq))
	next.Annotations = map[string]string{annWriter: c.deps.Identity}
	written, err := secrets.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		c.journaling, c.leftovers = false, true
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			if ferr := c.rereadLocked(ctx); ferr != nil {
				return false, ferr
			}
		}
		return false, fmt.Errorf("writing lease checkpoint %s/%s (journal segment %d): %w", c.opts.Namespace, c.opts.SecretName, seq, err)
	}
	c.index, c.journal, c.journalBytes = written, seq, c.journalBytes+len(seg)
	c.base.apply(&c.delta)
	return true, nil
}

// readJournal reads the journal segments 1..n of generation gen, in order,
// in one list.
func (c *Checkpointer) readJournal(ctx context.Context, gen string, n int) ([]delta, error) {
	if n == 0 {
		return nil, nil
	}
	list, err := readRetried(ctx, c, func() (*corev1.SecretList, error) {
		return c.deps.Secrets.Secrets(c.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: componentSelector + "," + labelJournal + "=" + gen})
	})
	if err != nil {
		return nil, fmt.Errorf("listing lease checkpoint journal segments: %w", err)
	}
	byName := make(map[string]*corev1.Secret, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	deltas := make([]delta, 0, n)
	for seq := 1; seq <= n; seq++ {
		name := segmentName(c.opts.SecretName, gen, seq)
		s := byName[name]
		if s == nil {
			return nil, fmt.Errorf("%w: journal segment %s is missing", ErrCorrupt, name)
		}
		sum := sha256.Sum256(s.Data[keyPayload])
		if hex.EncodeToString(sum[:]) != string(s.Data[keySHA256]) {
			return nil, fmt.Errorf("%w: journal segment %s: digest mismatch", ErrCorrupt, name)
		}
		d, err := decodeDelta(s.Data[keyPayload], c.deps.Codec)
		if err != nil {
			return nil, fmt.Errorf("journal segment %s: %w", name, err)
		}
		deltas = append(deltas, d)
	}
	return deltas, nil
}

func segmentName(name, generation string, seq int) string {
	return fmt.Sprintf("%s-%s-j%d", name, generation, seq)
}
