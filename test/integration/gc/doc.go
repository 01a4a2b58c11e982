// Package gc tests the orphan collector of pkg/gc on a real control plane,
// with the real providers behind it: the gcp provider against the Compute
// Engine fake of test/gcefake, and the kubernetes provider against real
// pods. Instances and pods are planted as a crashed operator or a hand-removed
// finalizer would leave them, and each sweep is checked against the rules of
// docs/gc.md. The clock is fake so that ages are exact; everything else is real.
package gc
