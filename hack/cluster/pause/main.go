// Command pause is the sandbox (infrastructure) container of `make
// cluster`'s pods: it holds the pod's namespaces and waits until it is
// told to stop, as registry.k8s.io/pause does, which cannot be pulled
// here. It reaps the zombies of the pod's shared process namespace.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
