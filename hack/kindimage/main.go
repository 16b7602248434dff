// Command kindimage builds the kind node image offline (test/kind.NodeImage): from Debian's
// packages and Go modules only, cached by a hash of its inputs in Docker and under
// .cache/kind. It prints the image's local tag. Linux, root (mmdebstrap) and Docker.
//
//	go tool task kind-image
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/openmcp-project/service-provider-kro/test/kind"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	start := time.Now()
	tag, err := kind.NodeImage(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kindimage:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "kindimage: %s ready in %s\n", tag, time.Since(start).Round(time.Second))
	fmt.Println(tag)
}
