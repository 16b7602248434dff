package ociimage

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// RegistryOptions say how to reach a registry. The zero value is anonymous HTTPS with the
// system's CAs.
type RegistryOptions struct {
	// Username and Password are sent as basic auth (the registry's token flow included)
	// when Username is set.
	Username, Password string
	// RootCAs verify the registry's certificate; nil means the system's. Ignored when
	// Transport is set.
	RootCAs *x509.CertPool
	// Transport, when set, is the transport used as it is (e.g. an httptest server's).
	Transport http.RoundTripper
	// PlainHTTP allows talking to the registry over http (as for localhost).
	PlainHTTP bool
}

// Parse parses reference and returns it with the remote options that reach its registry.
func (o RegistryOptions) Parse(reference string) (name.Reference, []remote.Option, error) {
	var nameOpts []name.Option
	if o.PlainHTTP {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ref, err := name.ParseReference(reference, nameOpts...)
	if err != nil {
		return nil, nil, err
	}
	tr := o.Transport
	if tr == nil {
		t := remote.DefaultTransport.(*http.Transport).Clone()
		if o.RootCAs != nil {
			t.TLSClientConfig = &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12}
		}
		tr = t
	}
	auth := authn.Anonymous
	if o.Username != "" {
		auth = &authn.Basic{Username: o.Username, Password: o.Password}
	}
	return ref, []remote.Option{remote.WithTransport(tr), remote.WithAuth(auth)}, nil
}

// Push uploads idx, its images and their blobs to reference (registry/repository:tag or
// @digest) and returns the index's digest.
func Push(ctx context.Context, idx v1.ImageIndex, reference string, opts RegistryOptions) (v1.Hash, error) {
	ref, ropts, err := opts.Parse(reference)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.WriteIndex(ref, idx, append(ropts, remote.WithContext(ctx))...); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}

// PushLayout pushes the image index of the OCI layout in dir (see WriteLayout) to reference.
func PushLayout(ctx context.Context, dir, reference string, opts RegistryOptions) (v1.Hash, error) {
	idx, err := ReadLayout(dir)
	if err != nil {
		return v1.Hash{}, err
	}
	return Push(ctx, idx, reference, opts)
}

// PullIndex returns the image index at reference. Blobs are fetched when they are read.
func PullIndex(ctx context.Context, reference string, opts RegistryOptions) (v1.ImageIndex, error) {
	ref, ropts, err := opts.Parse(reference)
	if err != nil {
		return nil, err
	}
	return remote.Index(ref, append(ropts, remote.WithContext(ctx))...)
}

// Pull returns the image at reference for platform, as a container runtime on that
// platform would pick it from an index (a plain image must be of the platform too).
// Layers are fetched when they are read (e.g. by ExtractFile).
func Pull(ctx context.Context, reference string, platform v1.Platform, opts RegistryOptions) (v1.Image, error) {
	ref, ropts, err := opts.Parse(reference)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(ref, append(ropts, remote.WithContext(ctx), remote.WithPlatform(platform))...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	got := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
	if !got.Satisfies(platform) {
		return nil, fmt.Errorf("%s is an image for %s, not %s", reference, got, platform)
	}
	return img, nil
}
