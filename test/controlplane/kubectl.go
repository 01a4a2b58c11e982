package controlplane

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
)

// Kubectl runs the kubectl of BinDir (`make tools`) against this control
// plane as its admin, from the repository root (so that paths like
// artifacts/install/... resolve), with stdin when given; it returns the
// combined output.
func (cp *ControlPlane) Kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(cp.opts.BinDir, "kubectl"), append([]string{"--kubeconfig", cp.KubeconfigPath}, args...)...)
	cmd.Dir = root
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
