package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// maxGenerationSkips bounds how many taken generations one write skips
// (each one is shards another attempt left; a fresh one is found at once
// unless writers race).
const maxGenerationSkips = 16

// componentLabels mark every checkpoint Secret (the index and its shards);
// componentSelector selects them.
func componentLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/managed-by": "proxy-operator", "app.kubernetes.io/component": "lease-checkpoint"}
}

const componentSelector = "app.kubernetes.io/component=lease-checkpoint"

// writeLocked writes payload, a snapshot: its shards first (under a
// generation no Secret has yet), then the index Secret that names them
// (with an empty journal), then the shards and journal segments of older
// generations are deleted. A reader sees the old checkpoint or the new one,
// never a mix. The index carries no payload, so that a journal write,
// which updates it, stays small; the release before the journal read the
// index's payload and then its shards, so it reads this layout too.
//
// A write never waits on what an earlier attempt left: each attempt takes a
// generation above every one this writer tried, and a shard name that
// exists already (a crashed or fenced writer's, or its own attempt whose
// answer was lost) moves it to the next generation. Only a writer that
// created every shard of a generation itself names it in the index, so an
// index never names another writer's shards.
func (c *Checkpointer) writeLocked(ctx context.Context, payload []byte, sum [sha256.Size]byte, final bool) error {
	secrets := c.deps.Secrets.Secrets(c.opts.Namespace)
	oldGen, oldShards, oldJournal := c.generation, 1, 0
	if c.index != nil {
		oldShards, _ = strconv.Atoi(string(c.index.Data[keyShards]))
		oldJournal, _ = strconv.Atoi(string(c.index.Data[keyJournal]))
	}
	// chunks[0] is the index's part: none.
	chunks := [][]byte{nil}
	for rest := payload; len(rest) > 0; {
		n := min(len(rest), shardBytes)
		chunks = append(chunks, rest[:n])
		rest = rest[n:]
	}
	gen := max(oldGen, c.triedGen) + 1
	for skips := 0; ; skips++ {
		err := c.createShards(ctx, chunks, gen)
		if err == nil {
			break
		}
		c.triedGen, c.leftovers = gen, true
		if !apierrors.IsAlreadyExists(err) || skips == maxGenerationSkips {
			return err
		}
		gen++
	}
	genStr := strconv.FormatUint(gen, 10)
	data := map[string][]byte{
		keyJournal:    []byte("0"),
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
			Labels: componentLabels(), Annotations: annotations}, Data: data}, metav1.CreateOptions{})
	} else {
		next := c.index.DeepCopy()
		next.Data = data
		next.Annotations = annotations
		written, err = secrets.Update(ctx, next, metav1.UpdateOptions{})
	}
	if err != nil {
		// The shards are left over, or (when the update landed and its
		// answer was lost) the index names them: the next attempt takes a
		// later generation either way.
		c.triedGen, c.leftovers = max(c.triedGen, gen), true
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) {
			if ferr := c.rereadLocked(ctx); ferr != nil {
				return ferr
			}
		}
		return fmt.Errorf("writing lease checkpoint %s/%s: %w", c.opts.Namespace, c.opts.SecretName, err)
	}
	c.index, c.generation = written, gen
	oldStr := strconv.FormatUint(oldGen, 10)
	old := make([]string, 0, oldShards+oldJournal)
	for i := 1; i < oldShards; i++ {
		old = append(old, shardName(c.opts.SecretName, oldStr, i))
	}
	// One past the journal too: the segment a writer killed or fenced
	// before its commit left.
	for seq := 1; seq <= oldJournal+1; seq++ {
		old = append(old, segmentName(c.opts.SecretName, oldStr, seq))
	}
	for _, name := range old {
		if err := secrets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Error(err, "deleting an old lease checkpoint shard", "shard", name)
			c.leftovers = true
		}
	}
	if c.leftovers {
		// Shards and segments of generations below this one are nobody's: a
		// writer that could still name them in the index was fenced by this
		// write.
		c.leftovers = !c.deleteShards(ctx, func(p part) bool { return p.gen < gen })
	}
	return nil
}

// createShards creates the extra shards (chunks[1:]) of generation gen.
func (c *Checkpointer) createShards(ctx context.Context, chunks [][]byte, gen uint64) error {
	secrets := c.deps.Secrets.Secrets(c.opts.Namespace)
	genStr := strconv.FormatUint(gen, 10)
	for i := 1; i < len(chunks); i++ {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: shardName(c.opts.SecretName, genStr, i), Namespace: c.opts.Namespace, Labels: componentLabels()},
			Data: map[string][]byte{keyPayload: chunks[i]}}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("writing lease checkpoint shard %s: %w", s.Name, err)
		}
	}
	return nil
}

// deleteLeftovers deletes, at takeover (after fence: no other writer can
// name a shard in the index any more), every shard and journal segment the
// loaded index does not name. A failure is logged; the next write tries again.
func (c *Checkpointer) deleteLeftovers(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var gen uint64
	journal := 0
	if c.index != nil {
		gen = c.generation
		journal, _ = strconv.Atoi(string(c.index.Data[keyJournal]))
	}
	c.leftovers = !c.deleteShards(ctx, func(p part) bool { return p.gen != gen || p.segment > journal })
}

// deleteShards deletes this checkpoint's shards and journal segments that
// doomed says, and reports whether it could list and delete them all. It
// also raises triedGen past every generation it saw, so that the next write
// skips them at once.
func (c *Checkpointer) deleteShards(ctx context.Context, doomed func(part) bool) bool {
	logger := log.FromContext(ctx)
	secrets := c.deps.Secrets.Secrets(c.opts.Namespace)
	list, err := secrets.List(ctx, metav1.ListOptions{LabelSelector: componentSelector})
	if err != nil {
		logger.Error(err, "listing lease checkpoint shards to delete leftovers")
		return false
	}
	ok, deleted := true, 0
	for i := range list.Items {
		name := list.Items[i].Name
		p, isPart := c.parsePart(name)
		if !isPart {
			continue
		}
		c.triedGen = max(c.triedGen, p.gen)
		if !doomed(p) {
			continue
		}
		if err := secrets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "deleting a leftover lease checkpoint shard", "shard", name)
			ok = false
			continue
		}
		deleted++
	}
	if deleted > 0 {
		logger.Info("leftover lease checkpoint shards deleted", "shards", deleted)
	}
	return ok
}

// part is a Secret of the checkpoint besides the index: a snapshot's shard
// <SecretName>-<gen>-<n> or a journal segment <SecretName>-<gen>-j<segment>.
type part struct {
	gen     uint64
	segment int // 0: a shard
}

// parsePart parses a shard's or a journal segment's name.
func (c *Checkpointer) parsePart(name string) (part, bool) {
	rest, ok := strings.CutPrefix(name, c.opts.SecretName+"-")
	if !ok {
		return part{}, false
	}
	genStr, nStr, ok := strings.Cut(rest, "-")
	if !ok {
		return part{}, false
	}
	gen, err := strconv.ParseUint(genStr, 10, 64)
	if err != nil {
		return part{}, false
	}
	segStr, isSegment := strings.CutPrefix(nStr, "j")
	n, err := strconv.Atoi(segStr)
	if err != nil || n < 1 {
		return part{}, false
	}
	if isSegment {
		return part{gen: gen, segment: n}, true
	}
	return part{gen: gen}, true
}

func shardName(name, generation string, i int) string {
	return fmt.Sprintf("%s-%s-%d", name, generation, i)
}
