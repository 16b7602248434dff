package kind

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// PrivilegedEnv forces the answer of the privileged probe: "yes" runs kind unmodified
// (kind passes --privileged to docker), "no" runs it through the docker wrapper. Unset,
// PrepareDocker asks the engine.
const PrivilegedEnv = "KIND_DOCKER_PRIVILEGED"

// DockerAnswers says whether a Docker engine answers `docker info`.
func DockerAnswers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info").Run() == nil
}

// Privileged says whether the engine starts privileged containers, by starting one from
// image (any local image with /bin/true), unless PrivilegedEnv gives the answer. The
// reason says what decided it: the engine's refusal, its consent or the variable.
func Privileged(ctx context.Context, image string) (ok bool, reason string, err error) {
	switch v := os.Getenv(PrivilegedEnv); v {
	case "yes":
		return true, PrivilegedEnv + "=yes", nil
	case "no":
		return false, PrivilegedEnv + "=no", nil
	case "":
	default:
		return false, "", fmt.Errorf("%s=%q: want yes, no or nothing", PrivilegedEnv, v)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--privileged", "--entrypoint", "/bin/true", image).CombinedOutput()
	if err == nil {
		return true, "docker run --privileged works", nil
	}
	msg := strings.TrimSpace(string(out))
	if ctx.Err() != nil || msg == "" {
		return false, "", fmt.Errorf("probing docker run --privileged: %w %s", err, msg)
	}
	return false, "docker run --privileged is refused: " + firstLine(msg), nil
}

var pathMu sync.Mutex

// PrepareDocker makes kind's docker calls work on this engine. Where privileged containers
// start (or PrivilegedEnv=yes), it changes nothing: kind runs as it is. Otherwise it writes
// the docker wrapper (files/docker) under .cache/kind and puts it first on this process's
// PATH, which kind's Docker provider searches for docker; restore undoes that. kind is a
// library here, so the process's PATH is kind's PATH; the wrapper passes every command
// but `docker run --privileged` through unchanged.
func PrepareDocker(ctx context.Context, log io.Writer, image string) (wrapped bool, restore func(), err error) {
	ok, reason, err := Privileged(ctx, image)
	if err != nil {
		return false, nil, err
	}
	if ok {
		fmt.Fprintf(log, "kind: runs unmodified (%s)\n", reason)
		return false, func() {}, nil
	}
	real, err := exec.LookPath("docker")
	if err != nil {
		return false, nil, err
	}
	cache, err := testenv.CacheDir()
	if err != nil {
		return false, nil, err
	}
	dir := filepath.Join(cache, "kind", "docker-wrapper")
	script, err := files.ReadFile("files/docker")
	if err != nil {
		return false, nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, nil, err
	}
	wrapper := filepath.Join(dir, "docker")
	if filepath.Dir(real) == dir {
		return false, nil, fmt.Errorf("docker on PATH is already the wrapper %s", wrapper)
	}
	body := strings.Replace(string(script), "@REAL_DOCKER@", real, 1)
	if err := os.WriteFile(wrapper+".tmp", []byte(body), 0o755); err != nil {
		return false, nil, err
	}
	if err := os.Rename(wrapper+".tmp", wrapper); err != nil {
		return false, nil, err
	}
	pathMu.Lock()
	old := os.Getenv("PATH")
	if err := os.Setenv("PATH", dir+string(os.PathListSeparator)+old); err != nil {
		pathMu.Unlock()
		return false, nil, err
	}
	pathMu.Unlock()
	fmt.Fprintf(log, "kind: %s; kind's docker is the wrapper %s\n", reason, wrapper)
	return true, func() {
		pathMu.Lock()
		defer pathMu.Unlock()
		_ = os.Setenv("PATH", old)
	}, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
