//go:build !unix

package flowcontrol

import "time"

// processCPU is not measured off unix; cpu-ns/op then reads 0.
func processCPU() time.Duration { return 0 }
