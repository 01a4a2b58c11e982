//go:build !linux

package gateway

import "testing"

// checkPipes: there are no pipes without splice(2).
func checkPipes(*testing.T, *relayer, bool) {}
