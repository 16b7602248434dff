# Multi-arch image of the provider, for those with Docker:
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=$(cat VERSION) .
# `go tool task image` builds the same image without Docker (hack/image, into bin/image):
# the same files from hack/image/rootfs, binary path, user, entrypoint, env and labels.
# go test ./hack/image fails when this final stage and hack/image/ociimage drift apart.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w" -o /out/service-provider-kro ./cmd/service-provider-kro
RUN mkdir -m 1777 /out/tmp

FROM scratch
ARG VERSION=dev
COPY hack/image/rootfs/etc/ /etc/
COPY --from=build /out/tmp /tmp
COPY --from=build /out/service-provider-kro /service-provider-kro
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 65532:65532
ENTRYPOINT ["/service-provider-kro"]
LABEL org.opencontainers.image.source="https://github.com/openmcp-project/service-provider-kro" \
      org.opencontainers.image.title="service-provider-kro" \
      org.opencontainers.image.version="${VERSION}"
