# Every target documents itself: `make help`.
.DEFAULT_GOAL := help
FUZZTIME ?= 10s

# Release stamps: override on the command line, e.g. make release VERSION=v0.4.0.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

.PHONY: run
run: ## run ferry on the embedded SQLite store with the example config
	go run ./cmd/ferry serve --config examples/ferry.toml

.PHONY: test
test: ## the README's test command (needs PostgreSQL; see README)
	go test -race ./...

.PHONY: vet
vet: ## gofmt check and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	go vet ./...

.PHONY: lint
lint: ## staticcheck, as CI runs it
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags ferrychaos ./cmd/ferry ./internal/chaos

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (default 10s)
	@for pkg in $$(go list ./...); do for t in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
		echo "fuzz $$pkg $$t"; go test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; done; done

.PHONY: release
release: ## static binaries for PLATFORMS in dist/ with SHA256SUMS (VERSION from git describe)
	rm -rf dist && mkdir -p dist
	@for p in $(PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; out=dist/ferry_$(VERSION)_$${os}_$${arch}; \
		echo "build $$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags '$(LDFLAGS)' -o $$out ./cmd/ferry || exit 1; \
	done
	cd dist && sha256sum ferry_* > SHA256SUMS && cat SHA256SUMS

.PHONY: ci
ci: ## what CI runs
	bash .ci/run
