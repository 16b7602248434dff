// Package kind runs kind clusters from a node image built offline: from Debian's packages
// and Go modules only, with no registry (NodeImage), on a Docker engine that may refuse
// privileged containers (the docker wrapper, see docker.go).
package kind

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// KubernetesVersion is the nodes' Kubernetes, the tests' kube-apiserver release.
const KubernetesVersion = testenv.KubernetesVersion

// SandboxImage is the pause image kind's containerd configuration names.
const SandboxImage = "registry.k8s.io/pause:3.10"

// NodeImageRepository is the local repository of the node image; its tag is a hash of
// everything the image is built from, so kind never tries to pull it.
const NodeImageRepository = "kro-kind-node"

// DebianSuite is the Debian release both root file systems are bootstrapped from.
const DebianSuite = "bookworm"

// NodePackages are the node's Debian packages (besides minbase): what kind's base image
// installs that Debian packages, with Debian's containerd, runc and CNI plugins.
var NodePackages = []string{
	"systemd", "systemd-sysv", "dbus", "containerd", "runc", "containernetworking-plugins",
	"iptables", "nftables", "iproute2", "mount", "util-linux", "kmod", "procps", "conntrack",
	"ethtool", "socat", "ca-certificates", "jq", "libseccomp2", "pigz", "fuse-overlayfs", "bash",
}

// ProxyPackages are the packages of kube-proxy's image below its binary: kube-proxy
// programs the node with iptables.
var ProxyPackages = []string{"iptables", "conntrack"}

//go:embed all:files
var files embed.FS

// NodeImage returns the node image's local tag, building it when neither Docker nor the
// cache under .cache/kind holds it. Building takes the binaries of NodeTools (built once
// and cached by testenv), bootstraps Debian twice with mmdebstrap, and imports the result
// into Docker. log receives what is done and how long each step took. It needs Linux,
// since the binaries built on this machine go into the linux image.
func NodeImage(ctx context.Context, log io.Writer) (string, error) {
	if runtime.GOOS != "linux" {
		return "", fmt.Errorf("the kind node image needs Linux: it is made of binaries built on this machine, which is %s", runtime.GOOS)
	}
	bins, err := testenv.ToolPaths(ctx, log, NodeTools()...)
	if err != nil {
		return "", err
	}
	kindDir, err := kindModuleDir(ctx)
	if err != nil {
		return "", err
	}
	key, err := nodeImageKey(bins, kindDir)
	if err != nil {
		return "", err
	}
	tag := NodeImageRepository + ":" + key
	if dockerImageExists(ctx, tag) {
		return tag, nil
	}
	cache, err := testenv.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "kind")
	archive := filepath.Join(dir, "node-"+key+".tar")
	if _, err := os.Stat(archive); err != nil {
		if err := buildNodeArchive(ctx, log, bins, kindDir, dir, archive); err != nil {
			return "", err
		}
	}
	start := time.Now()
	if err := run(ctx, nil, "docker", "import", archive, tag+"-rootfs"); err != nil {
		return "", err
	}
	// docker import cannot set STOPSIGNAL; a build from the imported root file system can.
	// The legacy builder needs nothing but the engine.
	build := exec.CommandContext(ctx, "docker", "build", "-t", tag, "-")
	build.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	build.Stdin = strings.NewReader("FROM " + tag + "-rootfs\n" +
		"ENV container=docker\n" +
		"STOPSIGNAL SIGRTMIN+3\n" +
		`ENTRYPOINT ["/kind/bin/unprivileged-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]` + "\n")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker build of %s: %w\n%s", tag, err, tail(string(out), 20))
	}
	_ = run(ctx, nil, "docker", "rmi", tag+"-rootfs")
	prune(ctx, dir, key)
	fmt.Fprintf(log, "kind: imported %s into Docker in %s\n", tag, time.Since(start).Round(time.Second))
	return tag, nil
}

// prune removes the node images and root file systems of other inputs (about 1 GB each)
// from Docker and the cache, keeping key's.
func prune(ctx context.Context, dir, key string) {
	out, _ := exec.CommandContext(ctx, "docker", "images", NodeImageRepository, "--format", "{{.Tag}}").Output()
	for _, t := range strings.Fields(string(out)) {
		if t != key {
			_ = run(ctx, nil, "docker", "rmi", NodeImageRepository+":"+t)
		}
	}
	old, _ := filepath.Glob(filepath.Join(dir, "node-*.tar"))
	for _, f := range old {
		if filepath.Base(f) != "node-"+key+".tar" {
			_ = os.Remove(f)
		}
	}
}

// nodeImageKey hashes the node image's inputs: the binaries (their cache folders are named
// by their own inputs' hash), the files of this package, kind's base image files, the
// package lists and the suite.
func nodeImageKey(bins map[string]string, kindDir string) (string, error) {
	h := sha256.New()
	var names []string
	for n := range bins {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintln(h, n, filepath.Base(filepath.Dir(bins[n])))
	}
	fmt.Fprintln(h, DebianSuite, NodePackages, ProxyPackages, KubernetesVersion, SandboxImage)
	node, err := fs.Sub(files, "files/node")
	if err != nil {
		return "", err
	}
	for _, fsys := range []fs.FS{node, os.DirFS(filepath.Join(kindDir, "images", "base", "files"))} {
		err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := fs.ReadFile(fsys, p)
			fmt.Fprintln(h, p, len(data))
			h.Write(data)
			return err
		})
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// buildNodeArchive writes the node's root file system as a tar to archive: kind's base
// image files, this package's files over them, kubelet, kubeadm and kubectl, and the
// control plane's images as archives under /kind/images, copied into a Debian bootstrap.
func buildNodeArchive(ctx context.Context, log io.Writer, bins map[string]string, kindDir, dir, archive string) error {
	start := time.Now()
	stage := archive + ".stage"
	if err := os.RemoveAll(stage); err != nil {
		return err
	}
	defer os.RemoveAll(stage)

	proxyBase, err := bootstrap(ctx, log, dir, "proxy", ProxyPackages, nil)
	if err != nil {
		return err
	}
	images, err := kubeadmImages(ctx, bins[Kubeadm.Name])
	if err != nil {
		return err
	}
	comps, err := components(images, bins, proxyBase)
	if err != nil {
		return err
	}
	for _, c := range comps {
		base := strings.NewReplacer("/", "_", ":", "_").Replace(c.tags[0])
		if err := writeComponent(c, filepath.Join(stage, "kind", "images", base+".tar")); err != nil {
			return fmt.Errorf("image %s: %w", c.tags[0], err)
		}
	}
	fmt.Fprintf(log, "kind: wrote %d control plane images in %s\n", len(comps), time.Since(start).Round(time.Second))

	if err := copyTree(os.DirFS(filepath.Join(kindDir, "images", "base", "files")), stage); err != nil {
		return err
	}
	node, err := fs.Sub(files, "files/node")
	if err != nil {
		return err
	}
	if err := copyTree(node, stage); err != nil {
		return err
	}
	for _, t := range []testenv.Tool{Kubelet, Kubeadm, testenv.Kubectl} {
		if err := copyFile(bins[t.Name], filepath.Join(stage, "usr", "bin", t.Name), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(stage, "kind", "version"), []byte(KubernetesVersion), 0o644); err != nil {
		return err
	}
	_, err = bootstrap(ctx, log, dir, "node", NodePackages, []string{
		"--customize-hook=sync-in " + stage + " /",
		"--customize-hook=chroot \"$1\" /kind/bin/finish-node-image",
	})
	if err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, "debian-node.tar"), archive); err != nil {
		return err
	}
	fmt.Fprintf(log, "kind: built the node's root file system %s in %s\n", filepath.Base(archive), time.Since(start).Round(time.Second))
	return nil
}

// bootstrap runs mmdebstrap (minbase and packages, with hooks) into dir/debian-<name>.tar.
// Without hooks the tar is kept and reused while the package list is the same.
func bootstrap(ctx context.Context, log io.Writer, dir, name string, packages, hooks []string) (string, error) {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", fmt.Errorf("the kind node image is bootstrapped with mmdebstrap, which is not installed (Debian: apt-get install mmdebstrap): %w", err)
	}
	out := filepath.Join(dir, "debian-"+name+".tar")
	if len(hooks) == 0 {
		sum := sha256.Sum256([]byte(DebianSuite + " " + strings.Join(packages, ",")))
		out = filepath.Join(dir, "debian-"+name+"-"+hex.EncodeToString(sum[:])[:12]+".tar")
		if _, err := os.Stat(out); err == nil {
			return out, nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	start := time.Now()
	args := append([]string{"--variant=minbase", "--include=" + strings.Join(packages, ",")}, hooks...)
	tmp := strings.TrimSuffix(out, ".tar") + ".tmp.tar" // mmdebstrap picks the format by the name
	args = append(args, DebianSuite, tmp)
	var buf strings.Builder
	if err := run(ctx, &buf, "mmdebstrap", args...); err != nil {
		return "", fmt.Errorf("%w\n%s", err, tail(buf.String(), 40))
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "kind: bootstrapped Debian %s (%s) in %s\n", DebianSuite, name, time.Since(start).Round(time.Second))
	return out, nil
}

func kindModuleDir(ctx context.Context) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kind")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding the kind module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// copyTree copies fsys into dir. Files under kind/bin and usr/local/bin are executable.
func copyTree(fsys fs.FS, dir string) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if strings.HasPrefix(p, "kind/bin/") || strings.HasPrefix(p, "usr/local/bin/") {
			mode = 0o755
		}
		return os.WriteFile(dst, data, mode)
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

func dockerImageExists(ctx context.Context, ref string) bool {
	return exec.CommandContext(ctx, "docker", "image", "inspect", ref).Run() == nil
}

// run runs a command; its output goes to out, or into the error when out is nil.
func run(ctx context.Context, out io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var buf strings.Builder
	if out == nil {
		out = &buf
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args[:min(len(args), 3)], " "), err, tail(buf.String(), 20))
	}
	return nil
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}
