# The two commands a newcomer needs: `make demo` and `make test`.
GO ?= go
# A count, not a duration: a duration's deadline races the fuzz workers on a
# loaded machine and fails with a bare "context deadline exceeded" (go.dev/issue/75804).
FUZZTIME ?= 50000x

.PHONY: demo test test-ui vet fuzz bench bench-compare chaos

demo:
	$(GO) run ./cmd/herald demo

# The tools first, so that a machine without them stops at once, saying why.
test:
	./scripts/ensure-redis
	GO=$(GO) ./scripts/ensure-cgo
	$(MAKE) vet
	$(GO) test -race -count=1 -timeout 9m ./...
	$(MAKE) fuzz

# The dashboard in headless Chromium: sign in, find a dead notification,
# replay it, see it succeed; escaping and CSRF checks; it saves the README's
# screenshots in docs/. Built with the browser tag, so `make test` and plain
# `go test ./...` do not need Chromium.
test-ui:
	./scripts/ensure-redis
	GO=$(GO) ./scripts/ensure-cgo
	./scripts/ensure-chromium
	$(GO) vet -tags browser ./ui
	$(GO) test -tags browser -race -count=1 -timeout 5m -run '^TestBrowser$$' ./ui

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	cd bench/compare && $(GO) vet ./...

# Short fuzz runs of the decoders that read outside input, and of the one
# that reads records back from Redis.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseDuration$$' -fuzztime $(FUZZTIME) ./notify
	$(GO) test -run '^$$' -fuzz '^FuzzDigest$$' -fuzztime $(FUZZTIME) ./notify
	$(GO) test -run '^$$' -fuzz '^FuzzAttemptJSON$$' -fuzztime $(FUZZTIME) ./notify
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./policy
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEnqueue$$' -fuzztime $(FUZZTIME) ./api
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime $(FUZZTIME) ./api
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./store
	$(GO) test -run '^$$' -fuzz '^FuzzRenderOrderNotify$$' -fuzztime $(FUZZTIME) ./templates
	$(GO) test -run '^$$' -fuzz '^FuzzLookup$$' -fuzztime $(FUZZTIME) ./notify/poll
	$(GO) test -run '^$$' -fuzz '^FuzzSessionCheck$$' -fuzztime $(FUZZTIME) ./ui
	$(GO) test -run '^$$' -fuzz '^FuzzEndpoint$$' -fuzztime $(FUZZTIME) ./endpoint

# Throughput and lateness figures: enqueue and drain rates over 20,000
# notifications, lateness of 10,000 spread over 5s, webhook sends per second.
bench:
	./scripts/ensure-redis
	$(GO) test -run '^$$' -bench 'Enqueue|Drain' -benchtime 20000x ./schedule
	$(GO) test -run '^$$' -bench 'Lateness' -benchtime 1x ./schedule
	$(GO) test -run '^$$' -bench . -benchtime 2s ./notify/webhook

# Herald against asynq in one process and one run, 3 repetitions, medians,
# on redis-servers of its own; prints the table docs/benchmarks.md holds.
bench-compare:
	./scripts/ensure-redis
	cd bench/compare && $(GO) run . -reps 3

# The full chaos run: real herald processes (an API, three dispatchers) on an
# AOF Redis, 20,000 webhooks to a receiver failing 30% of the time,
# dispatchers SIGKILLed every 3s, Redis and the API killed once; prints the
# ledger. Its 2,000-notification version is part of `make test`.
chaos:
	./scripts/ensure-redis
	$(GO) test -count=1 -run '^TestChaos$$' -timeout 15m -v ./internal/chaos -args -chaos.long
