// Command service-provider-kro is the OpenControlPlane service provider for kro.
//
//	service-provider-kro init   installs or upgrades the CRDs on the onboarding and platform cluster
//	service-provider-kro run    runs the controllers
//	service-provider-kro onboarding-kubeconfig  writes the provider's onboarding kubeconfig
//	service-provider-kro tenant-namespace       prints a ControlPlane's tenant namespace
//	service-provider-kro preflight              checks an existing installation before the switch
//	service-provider-kro flags  prints the flags of every command as Markdown
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: service-provider-kro <command> [flags]

commands:
  init                   install or upgrade the provider's CRDs on the onboarding and the platform cluster
  run                    run the provider
  onboarding-kubeconfig  write a kubeconfig for the provider's ServiceAccount on the onboarding cluster
  tenant-namespace       print the platform cluster's namespace of a ControlPlane (<namespace>/<name>)
  preflight              check an existing installation against this release before the switch; exits 1 when there is something to fix, 2 when it could not check
  flags                  print the flags of every command as Markdown (docs/reference/flags.md)

Run "service-provider-kro <command> -h" for the flags of a command.
`

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	cancel()
	os.Exit(code)
}

// exitError is an error that chooses the process's exit code, where a command gives
// its codes a meaning (preflight: 1 something to fix, 2 it could not check).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// execute runs the command args names and returns the process's exit code: 0 when it
// succeeded or printed its help (-h), the code of an *exitError, else 1.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "error:", err)
	if coded := (*exitError)(nil); errors.As(err, &coded) {
		return coded.code
	}
	return 1
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "init":
		return runInit(ctx, args[1:], stdout, stderr)
	case "run":
		return runManager(ctx, args[1:], stderr)
	case "onboarding-kubeconfig":
		return writeOnboardingKubeconfig(ctx, args[1:], stdout, stderr)
	case "tenant-namespace":
		return printTenantNamespace(args[1:], stdout, stderr)
	case "preflight":
		return runPreflight(ctx, args[1:], stdout, stderr)
	case "flags":
		if len(args) > 1 {
			return fmt.Errorf("service-provider-kro flags takes no arguments")
		}
		return writeFlagReference(stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
