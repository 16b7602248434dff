// Command testbin provides the binaries the tests run against, built from the Go module
// proxy once and cached in ~/.cache/service-provider-kro/tools (test/toolbuild.ToolsDir). It imports the standard library
// only, so that it starts in seconds and its builds (downloads included) run beside the
// compilation of the tests or of the sandbox (Taskfile.yaml).
//
//	testbin           prints the folder that holds kube-apiserver and etcd (KUBEBUILDER_ASSETS)
//	testbin -sandbox  builds every command the sandbox starts
//	testbin -e2e      builds every command the end-to-end suite starts (openmcp-operator too)
//	testbin -monitoring  builds promtool and rulemetrics, which test the monitoring kit
//	testbin -download -sandbox|-e2e|-monitoring  only downloads their modules (the build comes later)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/openmcp-project/service-provider-kro/test/toolbuild"
)

func main() {
	sandbox := flag.Bool("sandbox", false, "build what the sandbox starts (toolbuild.SandboxTools) and print nothing")
	e2e := flag.Bool("e2e", false, "build what the end-to-end suite starts (toolbuild.E2ETools) and print nothing")
	monitoring := flag.Bool("monitoring", false, "build what the monitoring kit's tests run (toolbuild.MonitoringTools) and print nothing")
	download := flag.Bool("download", false, "with -sandbox, -e2e or -monitoring: download the modules they are built from and build nothing")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if *sandbox || *e2e || *monitoring {
		tools := toolbuild.SandboxTools()
		switch {
		case *e2e:
			tools = toolbuild.E2ETools()
		case *monitoring:
			tools = toolbuild.MonitoringTools()
		}
		build := func() error { _, err := toolbuild.ToolPaths(ctx, os.Stderr, tools...); return err }
		if *download {
			build = func() error { return toolbuild.Download(ctx, os.Stderr, tools...) }
		}
		if err := build(); err != nil {
			fmt.Fprintln(os.Stderr, "testbin:", err)
			os.Exit(1)
		}
		return
	}
	dir, err := toolbuild.EnvtestAssets(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
