# Multi-arch image of the provider: docker buildx build --platform linux/amd64,linux/arm64 .
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w" -o /out/service-provider-kro ./cmd/service-provider-kro

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/service-provider-kro /service-provider-kro
USER 65532:65532
ENTRYPOINT ["/service-provider-kro"]
