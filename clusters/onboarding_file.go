package clusters

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeconfigPollInterval is how often the provider reads its onboarding kubeconfig file
// again. Polling the content, not watching the file, follows both an editor's rename and
// the symlink swap with which the kubelet updates a mounted Secret (that itself lags the
// Secret by up to a minute); reading a small file this often costs nothing.
const KubeconfigPollInterval = 5 * time.Second

// OnboardingFromFile loads the onboarding cluster's kubeconfig file (--onboarding-kubeconfig)
// for a provider that runs for long: Watch then follows the file, so that a renewed token
// written there (service-provider-kro onboarding-kubeconfig, or a Secret the kubelet mounts)
// is used without a restart. Relative paths in the file are resolved against its folder.
func OnboardingFromFile(path string) (*OnboardingAccess, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the %s cluster's kubeconfig: %w", Onboarding, err)
	}
	a := &OnboardingAccess{
		File:   path,
		source: "the onboarding kubeconfig " + path,
		parse:  func(data []byte) (*rest.Config, error) { return restConfigFromFile(path, data) },
	}
	if err := a.load(data); err != nil {
		return nil, err
	}
	a.loaded = sha256.Sum256(data)
	return a, nil
}

// restConfigFromFile is clientcmd.BuildConfigFromFlags("", path) on content already read,
// so that what is compared and what is used come from one reading of the file.
func restConfigFromFile(path string, data []byte) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	for _, c := range kc.Clusters {
		c.LocationOfOrigin = path
	}
	for _, u := range kc.AuthInfos {
		u.LocationOfOrigin = path
	}
	if err := clientcmd.ResolveLocalPaths(kc); err != nil {
		return nil, err
	}
	return clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// watchFile reads the kubeconfig file every KubeconfigPollInterval until ctx ends. A file
// that is missing or cannot be parsed for a moment (a writer that is not atomic) changes
// nothing: the current token stays in use, and the file is read again at the next tick.
func (a *OnboardingAccess) watchFile(ctx context.Context, log logr.Logger, restart func(reason string)) error {
	tick := time.NewTicker(KubeconfigPollInterval)
	defer tick.Stop()
	failed := "" // the last error reported, to report each once
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		rot, why, err := a.reread()
		if err != nil {
			if err.Error() != failed {
				log.Error(err, "keeping the current onboarding token", "file", a.File)
				failed = err.Error()
			}
			continue
		}
		failed = ""
		switch rot {
		case TokenRotated:
			log.Info(why, "file", a.File)
		case RestartNeeded:
			restart(why)
			return nil
		}
	}
}

// reread takes the file's content if it changed since the last reading. An error means
// the file cannot be used now and was not taken.
func (a *OnboardingAccess) reread() (Rotation, string, error) {
	data, err := os.ReadFile(a.File)
	if err != nil {
		return Unchanged, "", fmt.Errorf("reading the onboarding kubeconfig: %w", err)
	}
	sum := sha256.Sum256(data)
	if sum == a.loaded {
		return Unchanged, "", nil
	}
	if _, err := a.parse(data); err != nil {
		return Unchanged, "", fmt.Errorf("the onboarding kubeconfig %s holds no usable kubeconfig: %w", a.File, err)
	}
	a.loaded = sum
	rot, why := a.update(data)
	return rot, why, nil
}
