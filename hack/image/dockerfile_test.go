package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
	"github.com/openmcp-project/service-provider-kro/hack/image/rootfs"
)

const repoRoot = "../.."

// TestDockerfileMatchesSpec checks that the Dockerfile's final stage builds the image that
// ociimage.ProviderSpec describes: the same files, binary path, user, entrypoint, env,
// labels and platforms, and that it compiles the binary as the Taskfile's cross-build does.
func TestDockerfileMatchesSpec(t *testing.T) {
	dockerfile, taskfile := readRepoFiles(t)
	for _, err := range checkDockerfile(dockerfile, taskfile) {
		t.Error(err)
	}
}

// TestDockerfileDriftIsCaught changes the Dockerfile or the Taskfile in ways that make the
// two images differ, and expects checkDockerfile to notice each.
func TestDockerfileDriftIsCaught(t *testing.T) {
	dockerfile, taskfile := readRepoFiles(t)
	for name, tc := range map[string]struct{ file, old, new string }{
		"entrypoint":         {"Dockerfile", `ENTRYPOINT ["/service-provider-kro"]`, `ENTRYPOINT ["/manager"]`},
		"shell entrypoint":   {"Dockerfile", `ENTRYPOINT ["/service-provider-kro"]`, `ENTRYPOINT /service-provider-kro`},
		"a cmd":              {"Dockerfile", "USER 65532:65532\n", "USER 65532:65532\nCMD [\"run\"]\n"},
		"user":               {"Dockerfile", "USER 65532:65532", "USER 65532"},
		"base":               {"Dockerfile", "FROM scratch", "FROM gcr.io/distroless/static:nonroot"},
		"binary path":        {"Dockerfile", "/out/service-provider-kro /service-provider-kro", "/out/service-provider-kro /usr/bin/service-provider-kro"},
		"no rootfs":          {"Dockerfile", "COPY hack/image/rootfs/etc/ /etc/\n", ""},
		"rootfs elsewhere":   {"Dockerfile", "COPY hack/image/rootfs/etc/ /etc/", "COPY hack/image/rootfs/etc/ /usr/etc/"},
		"rootfs chmod":       {"Dockerfile", "COPY hack/image/rootfs/etc/ /etc/", "COPY --chmod=0600 hack/image/rootfs/etc/ /etc/"},
		"tmp mode":           {"Dockerfile", "mkdir -m 1777 /out/tmp", "mkdir -m 0777 /out/tmp"},
		"no tmp":             {"Dockerfile", "COPY --from=build /out/tmp /tmp\n", ""},
		"env":                {"Dockerfile", "ENV PATH=/usr/local/sbin:", "ENV PATH=/bin:"},
		"label":              {"Dockerfile", `org.opencontainers.image.title="service-provider-kro"`, `org.opencontainers.image.title="kro"`},
		"version arg":        {"Dockerfile", "ARG VERSION=dev\n", ""},
		"workdir":            {"Dockerfile", "USER 65532:65532\n", "USER 65532:65532\nWORKDIR /home\n"},
		"run in final stage": {"Dockerfile", "USER 65532:65532\n", "RUN true\nUSER 65532:65532\n"},
		"platforms":          {"Dockerfile", "--platform linux/amd64,linux/arm64 ", "--platform linux/amd64 "},
		"build flags":        {"Dockerfile", `-trimpath -ldflags="-s -w" -o /out`, `-ldflags="-s -w" -o /out`},
		"cgo":                {"Dockerfile", "RUN CGO_ENABLED=0 ", "RUN "},
		"task platforms":     {"Taskfile", "PLATFORMS: linux/amd64 linux/arm64", "PLATFORMS: linux/amd64 linux/arm64 linux/s390x"},
		"task build flags":   {"Taskfile", `go build -trimpath -ldflags="-s -w" -o bin/{{dir`, `go build -trimpath -o bin/{{dir`},
	} {
		d, tf := dockerfile, taskfile
		target := &d
		if tc.file == "Taskfile" {
			target = &tf
		}
		if !strings.Contains(*target, tc.old) {
			t.Errorf("%s: the %s no longer contains %q: update this test", name, tc.file, tc.old)
			continue
		}
		*target = strings.Replace(*target, tc.old, tc.new, 1)
		errs := checkDockerfile(d, tf)
		if len(errs) == 0 {
			t.Errorf("%s: the changed %s passes the check", name, tc.file)
			continue
		}
		t.Logf("%s: %v", name, errs[0])
	}
}

func readRepoFiles(t *testing.T) (dockerfile, taskfile string) {
	t.Helper()
	d, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	tf, err := os.ReadFile(filepath.Join(repoRoot, "Taskfile.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(d), string(tf)
}

// testVersion stands for VERSION: the --build-arg VERSION of the Docker build.
const testVersion = "v9.8.7-test"

// problems collects the differences found.
type problems []error

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// checkDockerfile returns how the image the Dockerfile builds differs from the one
// ociimage.ProviderSpec(testVersion) describes, and how its build differs from the
// Taskfile's cross-build.
func checkDockerfile(dockerfile, taskfile string) []error {
	spec := ociimage.ProviderSpec(testVersion, time.Unix(0, 0))
	header, stages, err := parseDockerfile(dockerfile)
	if err != nil {
		return []error{err}
	}
	if len(stages) != 2 || stages[0].name != "build" {
		return []error{fmt.Errorf("the Dockerfile has %d stages, want a stage named build and the final one", len(stages))}
	}
	build, final := stages[0], stages[1]
	var p problems
	binOut := checkBuild(&p, spec, header, build, taskfile)
	got, files, fromBuild := readFinalStage(&p, final, build)
	want := ociimage.RunConfig{Entrypoint: spec.Entrypoint, Cmd: spec.Cmd, User: spec.User, Env: spec.Env, WorkingDir: spec.WorkingDir, Labels: spec.Labels}
	if !got.Equal(want) {
		p.add("the Dockerfile's config is\n  %+v\nthe Go image's\n  %+v", got, want)
	}
	checkFiles(&p, spec, build, binOut, files, fromBuild)
	checkEmbed(&p)
	return p
}

// checkBuild compares the platforms in the Dockerfile's header and the Taskfile's
// cross-build with the spec's, and how both compile the binary. It returns the build
// stage's binary.
func checkBuild(p *problems, spec ociimage.Spec, header string, build stage, taskfile string) string {
	if got := headerPlatforms(header); !slices.Equal(got, spec.Platforms) {
		p.add("the Dockerfile's header builds for %v, the Go image for %v", got, spec.Platforms)
	}
	platforms, crossBuild, err := parseCrossBuild(taskfile)
	if err != nil {
		p.add("Taskfile: %v", err)
	} else if !slices.Equal(platforms, spec.Platforms) {
		p.add("the Taskfile's cross-build builds for %v, the Go image for %v", platforms, spec.Platforms)
	}
	var binOut string
	for _, in := range build.instrs {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			binOut = goBuildOutput(in.args)
			if d, tf := goBuildFlags(in.args), goBuildFlags(crossBuild); d != tf {
				p.add("the Dockerfile builds with %q, the Taskfile's cross-build with %q", d, tf)
			}
		}
	}
	if binOut == "" {
		p.add("the build stage has no RUN ... go build -o ...")
	}
	return binOut
}

// readFinalStage returns the config the final stage gives the image, the files it copies
// from the build context (image path -> "rootfs <path>") and those from the build stage
// (image path -> build stage path).
func readFinalStage(p *problems, final, build stage) (ociimage.RunConfig, map[string]string, map[string]string) {
	if final.from != "scratch" {
		p.add("the final stage is FROM %s, want scratch (the Go image has no base)", final.from)
	}
	args := map[string]string{}
	var got ociimage.RunConfig
	files, fromBuild := map[string]string{}, map[string]string{}
	for _, in := range final.instrs {
		var err error
		switch in.cmd {
		case "ARG":
			name, _, _ := strings.Cut(in.args, "=")
			args[name] = ""
			if name == "VERSION" {
				args[name] = testVersion
			}
		case "ENTRYPOINT":
			err = execForm(in.args, &got.Entrypoint)
		case "CMD":
			err = execForm(in.args, &got.Cmd)
		case "USER":
			got.User = in.args
		case "WORKDIR":
			got.WorkingDir = in.args
		case "ENV", "LABEL":
			err = keyValues(in, args, &got)
		case "COPY":
			err = copyInstr(in, build, files, fromBuild)
		default:
			err = fmt.Errorf("%s in the final stage has no counterpart in the Go image", in.cmd)
		}
		if err != nil {
			p.add("line %d: %s %s: %v", in.line, in.cmd, in.args, err)
		}
	}
	return got, files, fromBuild
}

// execForm parses the exec (JSON) form of ENTRYPOINT and CMD, the one the Go image has.
func execForm(s string, into *[]string) error {
	if err := json.Unmarshal([]byte(s), into); err != nil {
		return fmt.Errorf("not in exec (JSON) form: %w", err)
	}
	return nil
}

// checkFiles compares the files the Dockerfile puts into the image with the spec's: the
// binary, the root file system and the empty directories.
func checkFiles(p *problems, spec ociimage.Spec, build stage, binOut string, files, fromBuild map[string]string) {
	want := map[string]string{spec.BinaryPath: "binary " + binOut}
	if err := fs.WalkDir(spec.RootFS, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			want["/"+path] = "rootfs " + path
		}
		return err
	}); err != nil {
		p.add("%v", err)
	}
	for _, d := range spec.Dirs {
		want[d.Path] = fmt.Sprintf("dir %v", d.Mode|fs.ModeDir)
	}
	for dst, src := range fromBuild {
		if src == binOut {
			files[dst] = "binary " + binOut
			continue
		}
		mode, ok := mkdirMode(build, src)
		if !ok {
			p.add("COPY --from=build %s %s: the build stage does not make %s with mkdir -m MODE", src, dst, src)
			continue
		}
		files[dst] = fmt.Sprintf("dir %v", mode|fs.ModeDir)
	}
	if !maps.Equal(files, want) {
		p.add("the Dockerfile's image has\n  %v\nthe Go image\n  %v", files, want)
	}
}

// checkEmbed checks that rootfs.FS embeds every file of hack/image/rootfs (its Go files
// aside), which the Dockerfile copies.
func checkEmbed(p *problems) {
	onDisk, embedded := map[string]bool{}, map[string]bool{}
	_ = filepath.WalkDir("rootfs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(path, ".go") {
			onDisk[filepath.ToSlash(strings.TrimPrefix(path, "rootfs"+string(filepath.Separator)))] = true
		}
		return err
	})
	_ = fs.WalkDir(rootfs.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			embedded[path] = true
		}
		return err
	})
	if !maps.Equal(onDisk, embedded) || len(onDisk) == 0 {
		p.add("hack/image/rootfs holds %v, its go:embed %v", slices.Sorted(maps.Keys(onDisk)), slices.Sorted(maps.Keys(embedded)))
	}
}

type instruction struct {
	cmd, args string
	line      int
}

type stage struct {
	from, name string
	instrs     []instruction
}

// parseDockerfile returns the comment lines before the first instruction and the stages.
// It knows continuation lines and comments, not parser directives or heredocs.
func parseDockerfile(src string) (header string, stages []stage, err error) {
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			if len(stages) == 0 {
				header += line + "\n"
			}
			continue
		}
		start := i + 1
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				continue
			}
			line = strings.TrimSuffix(line, `\`) + " " + next
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			s := stage{}
			if len(f) > 0 {
				s.from = f[0]
			}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				continue
			}
			return "", nil, fmt.Errorf("line %d: %s before FROM", start, in.cmd)
		}
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
	}
	return header, stages, nil
}

// headerPlatforms returns the platforms of the --platform flag in the header comment.
func headerPlatforms(header string) []string {
	f := strings.Fields(header)
	for i, w := range f {
		if w == "--platform" && i+1 < len(f) {
			return strings.Split(f[i+1], ",")
		}
		if p, ok := strings.CutPrefix(w, "--platform="); ok {
			return strings.Split(p, ",")
		}
	}
	return nil
}

// parseCrossBuild returns the PLATFORMS and the command of the Taskfile's cross-build task.
func parseCrossBuild(taskfile string) ([]string, string, error) {
	var tf struct {
		Tasks map[string]struct {
			Vars map[string]any `json:"vars"`
			Cmds []any          `json:"cmds"`
		} `json:"tasks"`
	}
	if err := yaml.Unmarshal([]byte(taskfile), &tf); err != nil {
		return nil, "", err
	}
	cb, ok := tf.Tasks["cross-build"]
	if !ok {
		return nil, "", fmt.Errorf("no cross-build task")
	}
	platforms, _ := cb.Vars["PLATFORMS"].(string)
	var cmd string
	for _, c := range cb.Cmds {
		m, _ := c.(map[string]any)
		if s, _ := m["cmd"].(string); strings.Contains(s, "go build") {
			cmd = s
		}
	}
	if platforms == "" || cmd == "" {
		return nil, "", fmt.Errorf("cross-build has no PLATFORMS or no go build command")
	}
	// Template actions such as {{dir .ITEM}} hold blanks: make them single words.
	cmd = regexp.MustCompile(`\{\{[^}]*\}\}`).ReplaceAllString(cmd, "TEMPLATE")
	return strings.Fields(platforms), cmd, nil
}

// goBuildFlags is the go build part of a shell command: CGO_ENABLED and what follows
// "go build", without -o and its value.
func goBuildFlags(command string) string {
	words := shellWords(command)
	var cgo string
	for i, w := range words {
		if strings.HasPrefix(w, "CGO_ENABLED=") {
			cgo = w
		}
		if w == "go" && i+1 < len(words) && words[i+1] == "build" {
			var rest []string
			for j := i + 2; j < len(words); j++ {
				if words[j] == "-o" {
					j++
					continue
				}
				rest = append(rest, words[j])
			}
			return strings.Join(append([]string{cgo}, rest...), " ")
		}
	}
	return ""
}

// goBuildOutput is the -o of the go build in command.
func goBuildOutput(command string) string {
	words := shellWords(command)
	for i, w := range words {
		if w == "-o" && i+1 < len(words) {
			return words[i+1]
		}
	}
	return ""
}

// mkdirMode returns the mode of dir as a RUN mkdir -m MODE dir of the build stage makes it.
func mkdirMode(build stage, dir string) (fs.FileMode, bool) {
	for _, in := range build.instrs {
		w := shellWords(in.args)
		if in.cmd != "RUN" || len(w) != 4 || w[0] != "mkdir" || w[1] != "-m" || w[3] != dir {
			continue
		}
		m, err := strconv.ParseUint(w[2], 8, 32)
		if err != nil {
			return 0, false
		}
		mode := fs.FileMode(m & 0o777)
		if m&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		if m&^0o1777 != 0 {
			return 0, false
		}
		return mode, true
	}
	return 0, false
}

// copyInstr records what a COPY of the final stage puts into the image: files copied from
// the build context into files (image path -> "rootfs <path in hack/image/rootfs>"), paths
// copied from the build stage into fromBuild (image path -> build stage path).
func copyInstr(in instruction, build stage, files, fromBuild map[string]string) error {
	words := shellWords(in.args)
	from := ""
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		flag := words[0]
		words = words[1:]
		if f, ok := strings.CutPrefix(flag, "--from="); ok {
			from = f
			continue
		}
		return fmt.Errorf("COPY %s: the Go image has fixed owners and modes (root, files 0644, directories 0755)", flag)
	}
	if len(words) < 2 {
		return fmt.Errorf("COPY %s: want sources and a destination (not the JSON form)", in.args)
	}
	srcs, dst := words[:len(words)-1], words[len(words)-1]
	if from != "" {
		if from != build.name || len(srcs) != 1 {
			return fmt.Errorf("COPY --from=%s %v: want one path from the %s stage", from, srcs, build.name)
		}
		fromBuild[path.Clean(dst)] = srcs[0]
		return nil
	}
	const rootfsDir = "hack/image/rootfs/"
	for _, src := range srcs {
		if !strings.HasPrefix(src, rootfsDir) {
			return fmt.Errorf("COPY %s: files from the build context must come from %s", src, rootfsDir)
		}
		local := filepath.Join(repoRoot, filepath.FromSlash(src))
		st, err := os.Stat(local)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			target := dst
			if strings.HasSuffix(dst, "/") || len(srcs) > 1 {
				target = path.Join(dst, path.Base(src))
			}
			files[path.Clean(target)] = "rootfs " + strings.TrimPrefix(path.Clean(src), rootfsDir)
			continue
		}
		err = filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(local, p)
			if err != nil {
				return err
			}
			inRootfs := path.Join(strings.TrimPrefix(path.Clean(src), rootfsDir), filepath.ToSlash(rel))
			files[path.Join(dst, filepath.ToSlash(rel))] = "rootfs " + inRootfs
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// keyValues adds the key=value pairs (double quotes allowed) of an ENV or LABEL to c,
// substituting ${NAME} and $NAME of the stage's ARGs.
func keyValues(in instruction, args map[string]string, c *ociimage.RunConfig) error {
	for _, w := range shellWords(in.args) {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return fmt.Errorf("%q is not key=value", w)
		}
		var missing []string
		v = os.Expand(v, func(name string) string {
			val, ok := args[name]
			if !ok {
				missing = append(missing, name)
			}
			return val
		})
		if len(missing) > 0 {
			return fmt.Errorf("%s uses %v, not an ARG of the stage", k, missing)
		}
		if in.cmd == "ENV" {
			c.Env = append(c.Env, k+"="+v)
			continue
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[k] = v
	}
	return nil
}

// shellWords splits s at blanks outside double or single quotes and drops the quotes.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote = r
			inWord = true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
