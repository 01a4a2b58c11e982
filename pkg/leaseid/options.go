package leaseid

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Options are the --lease-signing-* flags.
type Options struct {
	// SecretName names the Secret holding the signing key; "" signs no IDs.
	SecretName string
	// Namespace is the operator's own, set by the composition root.
	Namespace string
}

// Enabled reports whether lease IDs are signed.
func (o *Options) Enabled() bool { return o.SecretName != "" }

// AddFlags registers the --lease-signing-* flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretName, "lease-signing-secret", o.SecretName, "Secret (in the operator's namespace) holding the key lease IDs are signed with, created on first start; a lease the checkpoint missed in a crash is re-admitted when its holder renews or releases it (a report only records its cooldown). Empty: random IDs, such leases are lost.")
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(o.SecretName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--lease-signing-secret %q: %s", o.SecretName, strings.Join(msgs, "; ")))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("--lease-signing-secret: the operator's namespace is unknown (give --namespace out of a cluster)"))
	}
	return errors.Join(errs...)
}
