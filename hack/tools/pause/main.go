// Command pause holds a pod's namespaces: it waits for SIGTERM or SIGINT and exits 0.
// The kind node image (test/kind) uses it as registry.k8s.io/pause, the sandbox image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
