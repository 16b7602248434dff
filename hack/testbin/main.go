// Command testbin provides the binaries the tests run against and prints the folder that
// holds kube-apiserver and etcd (for KUBEBUILDER_ASSETS). Binaries are built from the Go
// module proxy once and cached under .cache/; see test/testenv.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	dir, err := testenv.EnvtestAssets(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
