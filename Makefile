# Every target documents itself: `make help`.
.DEFAULT_GOAL := help
FUZZTIME ?= 10s

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

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (default 10s)
	@for pkg in $$(go list ./...); do for t in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
		echo "fuzz $$pkg $$t"; go test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; done; done

.PHONY: ci
ci: ## what CI runs
	bash .ci/run
