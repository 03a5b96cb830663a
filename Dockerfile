# writeback sidecar image: a static binary on distroless.
#
#   docker build -t ghcr.io/writeback/writeback:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg COMMIT=$(git rev-parse --short HEAD) .
#
# The image runs as distroless's nonroot user (65532) and has no shell: the
# Helm chart's preStop hook is lifecycle.preStop.sleep, not an exec of sleep.

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so that source changes reuse this layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/writeback/writeback/internal/cli.Version=${VERSION} -X github.com/writeback/writeback/internal/cli.Commit=${COMMIT}" \
      -o /out/writeback ./cmd/writeback

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/writeback /usr/local/bin/writeback
# The nonroot user of distroless, numerically: Kubernetes can verify
# runAsNonRoot only for a numeric user.
USER 65532:65532
EXPOSE 8480
ENTRYPOINT ["/usr/local/bin/writeback"]
CMD ["serve", "--config", "/etc/writeback/writeback.yaml"]
