package testenv

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
)

// What the Kubelet starts a container's process with: the image pulled with the pod's
// imagePullSecrets and its binary extracted, the command line, the environment resolved
// as Kubernetes does, and a kubeconfig with a token of the pod's ServiceAccount.

// start pulls the image, prepares the credential and starts the container's process.
func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod, ctr *corev1.Container) (*exec.Cmd, *pulledImage, error) {
	image, err := k.pull(ctx, pod, ctr.Image)
	if err != nil {
		return nil, nil, fmt.Errorf("pulling %s: %w", ctr.Image, err)
	}
	argv := image.config.Argv(ctr.Command, ctr.Args)
	if len(argv) == 0 {
		return nil, nil, fmt.Errorf("neither the image nor the container says what to run")
	}
	bin, err := k.extract(image, argv[0])
	if err != nil {
		return nil, nil, err
	}
	podDir := filepath.Join(k.opts.Dir, "pods", pod.Namespace+"_"+pod.Name)
	if err := os.MkdirAll(filepath.Join(podDir, "tmp"), 0o755); err != nil {
		return nil, nil, err
	}
	kubeconfig, err := k.serviceAccountKubeconfig(ctx, pod)
	if err != nil {
		return nil, nil, err
	}
	kubeconfigPath := filepath.Join(podDir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, nil, err
	}
	env, err := k.environment(ctx, pod, ctr, image.config.Env)
	if err != nil {
		return nil, nil, err
	}
	env = append(env, "KUBECONFIG="+kubeconfigPath, "HOME="+podDir, "TMPDIR="+filepath.Join(podDir, "tmp"))
	logFile, err := os.OpenFile(k.PodLogPath(pod.Namespace, pod.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	fmt.Fprintf(logFile, "=== testenv kubelet: %s %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = env
	cmd.Dir = podDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	ownProcessGroup(cmd)
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, image, nil
}

// pull fetches the image for this machine's platform (once per reference, as with
// imagePullPolicy IfNotPresent) with the credentials of the pod's imagePullSecrets.
func (k *Kubelet) pull(ctx context.Context, pod *corev1.Pod, ref string) (*pulledImage, error) {
	k.mu.Lock()
	cached := k.images[ref]
	k.mu.Unlock()
	if cached != nil {
		return cached, nil
	}
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return nil, err
	}
	opts := ociimage.RegistryOptions{RootCAs: k.opts.RegistryCAs}
	for _, ps := range pod.Spec.ImagePullSecrets {
		secret := &corev1.Secret{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ps.Name}, secret); err != nil {
			continue // as the kubelet does: a missing pull secret is skipped
		}
		if user, pass, ok := dockerCredentials(secret.Data[corev1.DockerConfigJsonKey], parsed.Context().RegistryStr()); ok {
			opts.Username, opts.Password = user, pass
			break
		}
	}
	img, err := ociimage.Pull(ctx, ref, v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}, opts)
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cfg, err := ociimage.ReadRunConfig(img)
	if err != nil {
		return nil, err
	}
	p := &pulledImage{digest: parsed.Context().Name() + "@" + digest.String(), config: cfg, img: img, files: map[string]string{}}
	k.mu.Lock()
	k.images[ref] = p
	k.mu.Unlock()
	return p, nil
}

// extract writes a file of the image (the binary to run) to the kubelet's folder, once.
func (k *Kubelet) extract(image *pulledImage, path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("the command %q is no absolute path; the testenv kubelet does not search PATH", path)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if f, ok := image.files[path]; ok {
		return f, nil
	}
	dir := filepath.Join(k.opts.Dir, "images", strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(image.digest))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, filepath.Base(path))
	if err := ociimage.ExtractFile(image.img, path, dst); err != nil {
		return "", fmt.Errorf("extracting %s from the image: %w", path, err)
	}
	image.files[path] = dst
	return dst, nil
}

// serviceAccountKubeconfig returns a kubeconfig of the platform cluster with a token of the
// pod's ServiceAccount, bound to the pod (it stops working once the pod is deleted).
func (k *Kubelet) serviceAccountKubeconfig(ctx context.Context, pod *corev1.Pod) ([]byte, error) {
	saName := pod.Spec.ServiceAccountName
	if saName == "" {
		saName = "default"
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: saName}}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := k.c.SubResource("token").Create(ctx, sa, req); err != nil {
		return nil, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", pod.Namespace, saName, err)
	}
	return tokenKubeconfig(k.opts.Platform, "in-cluster", "system:serviceaccount:"+pod.Namespace+":"+saName, req.Status.Token)
}

// environment resolves the container's environment as the kubelet does: the image's
// variables, then envFrom, then env in order, $(VAR) referring to earlier ones.
func (k *Kubelet) environment(ctx context.Context, pod *corev1.Pod, ctr *corev1.Container, imageEnv []string) ([]string, error) {
	var names []string
	values := map[string]string{}
	set := func(n, v string) {
		if _, ok := values[n]; !ok {
			names = append(names, n)
		}
		values[n] = v
	}
	for _, kv := range imageEnv {
		n, v, _ := strings.Cut(kv, "=")
		set(n, v)
	}
	for _, from := range ctr.EnvFrom {
		data, err := k.envSource(ctx, pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		for n, v := range data {
			set(from.Prefix+n, v)
		}
	}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			set(e.Name, expandEnv(e.Value, values))
			continue
		}
		v, err := k.envValueFrom(ctx, pod, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		set(e.Name, v)
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, n+"="+values[n])
	}
	return out, nil
}

func (k *Kubelet) envValueFrom(ctx context.Context, pod *corev1.Pod, src *corev1.EnvVarSource) (string, error) {
	switch {
	case src.FieldRef != nil:
		path := src.FieldRef.FieldPath
		switch {
		case path == "metadata.name":
			return pod.Name, nil
		case path == "metadata.namespace":
			return pod.Namespace, nil
		case path == "metadata.uid":
			return string(pod.UID), nil
		case path == "spec.nodeName":
			return k.opts.NodeName, nil
		case path == "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		case path == "status.hostIP", path == "status.hostIPs", path == "status.podIP", path == "status.podIPs":
			return "127.0.0.1", nil
		case strings.HasPrefix(path, "metadata.labels['"):
			return pod.Labels[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.labels['"), "']")], nil
		case strings.HasPrefix(path, "metadata.annotations['"):
			return pod.Annotations[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.annotations['"), "']")], nil
		}
		return "", fmt.Errorf("unsupported fieldRef %s", path)
	case src.SecretKeyRef != nil:
		s := &corev1.Secret{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: src.SecretKeyRef.Name}, s); err != nil {
			if apierrors.IsNotFound(err) && src.SecretKeyRef.Optional != nil && *src.SecretKeyRef.Optional {
				return "", nil
			}
			return "", err
		}
		return string(s.Data[src.SecretKeyRef.Key]), nil
	case src.ConfigMapKeyRef != nil:
		cm := &corev1.ConfigMap{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: src.ConfigMapKeyRef.Name}, cm); err != nil {
			if apierrors.IsNotFound(err) && src.ConfigMapKeyRef.Optional != nil && *src.ConfigMapKeyRef.Optional {
				return "", nil
			}
			return "", err
		}
		return cm.Data[src.ConfigMapKeyRef.Key], nil
	}
	return "", fmt.Errorf("unsupported valueFrom")
}

func (k *Kubelet) envSource(ctx context.Context, namespace string, from corev1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case from.SecretRef != nil:
		s := &corev1.Secret{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: from.SecretRef.Name}, s); err != nil {
			if apierrors.IsNotFound(err) && from.SecretRef.Optional != nil && *from.SecretRef.Optional {
				return out, nil
			}
			return nil, err
		}
		for n, v := range s.Data {
			out[n] = string(v)
		}
	case from.ConfigMapRef != nil:
		cm := &corev1.ConfigMap{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: from.ConfigMapRef.Name}, cm); err != nil {
			if apierrors.IsNotFound(err) && from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
				return out, nil
			}
			return nil, err
		}
		for n, v := range cm.Data {
			out[n] = v
		}
	}
	return out, nil
}

// expandEnv replaces $(NAME) with earlier variables' values; $$ escapes a $; unknown
// references stay as they are (Kubernetes' rules).
func expandEnv(s string, values map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			n := s[i+2 : i+2+end]
			if v, ok := values[n]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// dockerCredentials finds a registry's user and password in a .dockerconfigjson.
func dockerCredentials(data []byte, registry string) (string, string, bool) {
	var cfg struct {
		Auths map[string]struct {
			Username, Password, Auth string
		} `json:"auths"`
	}
	if json.Unmarshal(data, &cfg) != nil {
		return "", "", false
	}
	for host, a := range cfg.Auths {
		h := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://"), "/")
		if h != registry {
			continue
		}
		if a.Username == "" && a.Auth != "" {
			if raw, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
				a.Username, a.Password, _ = strings.Cut(string(raw), ":")
			}
		}
		return a.Username, a.Password, a.Username != ""
	}
	return "", "", false
}
