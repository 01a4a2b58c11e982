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

// writeLocked writes payload: extra shards first (under a generation no
// Secret has yet), then the index Secret that names them, then shards of
// older generations are deleted. A reader sees the old checkpoint or the
// new one, never a mix. One write when the payload fits in one Secret.
//
// A write never waits on what an earlier attempt left: each attempt takes a
// generation above every one this writer tried, and a shard name that
// exists already (a crashed or fenced writer's, or its own attempt whose
// answer was lost) moves it to the next generation. Only a writer that
// created every shard of a generation itself names it in the index, so an
// index never names another writer's shards.
func (c *Checkpointer) writeLocked(ctx context.Context, payload []byte, sum [sha256.Size]byte, final bool) error {
	secrets := c.deps.Secrets.Secrets(c.opts.Namespace)
	oldGen, oldShards := c.generation, 1
	if c.index != nil {
		oldShards, _ = strconv.Atoi(string(c.index.Data[keyShards]))
	}
	var chunks [][]byte
	for rest := payload; len(rest) > 0 || len(chunks) == 0; {
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
	for i := 1; i < oldShards; i++ {
		if err := secrets.Delete(ctx, shardName(c.opts.SecretName, oldStr, i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Error(err, "deleting an old lease checkpoint shard", "shard", shardName(c.opts.SecretName, oldStr, i))
			c.leftovers = true
		}
	}
	if c.leftovers {
		// Shards of generations below this one are nobody's: a writer that
		// could still name them in the index was fenced by this write.
		c.leftovers = !c.deleteShards(ctx, func(g uint64) bool { return g < gen })
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
// name a shard in the index any more), every shard the loaded index does
// not name. A failure is logged; the next write tries again.
func (c *Checkpointer) deleteLeftovers(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var gen uint64
	if c.index != nil {
		gen = c.generation
	}
	c.leftovers = !c.deleteShards(ctx, func(g uint64) bool { return g != gen })
}

// deleteShards deletes this checkpoint's shards whose generation doomed
// says, and reports whether it could list and delete them all. It also
// raises triedGen past every generation it saw, so that the next write
// skips them at once.
func (c *Checkpointer) deleteShards(ctx context.Context, doomed func(gen uint64) bool) bool {
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
		gen, isShard := c.shardGeneration(name)
		if !isShard {
			continue
		}
		c.triedGen = max(c.triedGen, gen)
		if !doomed(gen) {
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

// shardGeneration parses a shard name <SecretName>-<generation>-<n>.
func (c *Checkpointer) shardGeneration(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, c.opts.SecretName+"-")
	if !ok {
		return 0, false
	}
	genStr, nStr, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	gen, err := strconv.ParseUint(genStr, 10, 64)
	if err != nil {
		return 0, false
	}
	if n, err := strconv.Atoi(nStr); err != nil || n < 1 {
		return 0, false
	}
	return gen, true
}

func shardName(name, generation string, i int) string {
	return fmt.Sprintf("%s-%s-%d", name, generation, i)
}
