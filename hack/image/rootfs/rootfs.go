// Package rootfs holds the files of the provider image besides its binary: the tree below
// this directory (the Go files aside) is copied to / of the image, by the Go image builder
// (hack/image/ociimage, through FS) and by the Dockerfile (COPY hack/image/rootfs/<dir>/
// /<dir>/), so that both images have the same files. A test in hack/image checks that FS,
// this directory and the Dockerfile agree.
package rootfs

import "embed"

// FS is the image's root file system without the binary: etc/passwd and etc/group naming
// the non-root user and group 65532 (nonroot), as in distroless's static:nonroot.
//
//go:embed etc
var FS embed.FS
