# Ferry in a container: a static binary on an empty base image, run as a
# non-root user, its SQLite store on a volume. docs/deploy.md has the commands.
#
#   docker build -t ferry --build-arg VERSION=$(git describe --tags --always --dirty) \
#       --build-arg COMMIT=$(git rev-parse HEAD) --build-arg DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
#
# With buildah, `buildah bud --format docker ...`: the OCI format drops HEALTHCHECK.

# The Go toolchain to build with; any image with Go 1.26, /bin/sh and a CA bundle.
ARG GO_IMAGE=golang:1.26-bookworm

FROM ${GO_IMAGE} AS build
ARG GOPROXY=https://proxy.golang.org,direct
ARG VERSION=dev
ARG COMMIT=unknown
ARG DATE=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    GOPROXY="$GOPROXY" go mod download
COPY . .
# CGO_ENABLED=0: modernc.org/sqlite is pure Go, so the binary needs no libc.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath \
      -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT -X main.date=$DATE" \
      -o /out/usr/local/bin/ferry ./cmd/ferry
# The final image has no shell, so its user, state folder and CA bundle (for
# forwarding to an https app) are prepared here.
RUN mkdir -p /out/etc/ssl/certs /out/etc/ferry /out/var/lib/ferry && \
    echo 'ferry:x:65532:65532:ferry:/var/lib/ferry:/sbin/nologin' > /out/etc/passwd && \
    echo 'ferry:x:65532:' > /out/etc/group && \
    cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/

FROM scratch
COPY --from=build /out/etc /etc
COPY --from=build --chown=65532:65532 /out/var/lib/ferry /var/lib/ferry
COPY --from=build /out/usr/local/bin/ferry /usr/local/bin/ferry
USER 65532:65532
# A relative sqlite path (sqlite:ferry.db) lands on the volume too.
WORKDIR /var/lib/ferry
VOLUME /var/lib/ferry
EXPOSE 8080
# The config is mounted at /etc/ferry/ferry.toml; its ${VAR} values (store.url,
# secrets) come from the environment. --listen makes the receiver reachable from
# outside the container whatever http.listen says.
ENTRYPOINT ["/usr/local/bin/ferry"]
CMD ["serve", "--config", "/etc/ferry/ferry.toml", "--listen", "0.0.0.0:8080"]
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/ferry", "healthcheck", "--url", "http://127.0.0.1:8080/readyz"]
