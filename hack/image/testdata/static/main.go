// Command static is a static binary for hack/image's tests.
package main

func main() {}
