package checkpoint

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
)

// TestWriteV1Fixture writes testdata/v1: the Secrets this release's
// checkpointer writes, and the state they hold.
func TestWriteV1Fixture(t *testing.T) {
	if os.Getenv("WRITE_V1_FIXTURE") == "" {
		t.Skip("WRITE_V1_FIXTURE unset")
	}
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(v1FixtureTime)
	store := newStore(t, clk)
	fill(t, store, 12, 40, 0)
	clk.Step(3 * time.Minute)
	kube := fake.NewClientset()
	o := checkpoint.DefaultOptions()
	o.SecretName, o.Namespace = "leases", "operator"
	c, err := checkpoint.New(o, checkpoint.Deps{Secrets: kube.CoreV1(), Store: store, Codec: proxylease.MetadataCodec{}, Clock: clk, Identity: "v1-writer"})
	if err != nil {
		t.Fatal(err)
	}
	c.RVBase(1780000000000000)
	if err := c.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := kube.CoreV1().Secrets("operator").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		list.Items[i].ResourceVersion = ""
	}
	write := func(name string, v any) {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("testdata/v1/"+name, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("secrets.json", list.Items)
	write("state.json", summarize(stateOf(store)))
}
