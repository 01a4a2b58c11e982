//go:build unix

package flowcontrol

import (
	"syscall"
	"time"
)

// processCPU is this process's user+system CPU time. Benchmarks report it
// per op next to wall time because the benchmark machine is shared: wall
// time there measures the neighbours too.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
