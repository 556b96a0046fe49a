# The two commands a newcomer needs: `make demo` and `make test`.
GO ?= go
FUZZTIME ?= 5s

.PHONY: demo test vet fuzz bench

demo:
	$(GO) run ./cmd/herald demo

test: vet
	./scripts/ensure-redis
	$(GO) test -race -count=1 -timeout 9m ./...
	$(MAKE) fuzz

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# Short fuzz runs of the decoders that read outside input.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseDuration$$' -fuzztime $(FUZZTIME) ./notify
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./policy
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEnqueue$$' -fuzztime $(FUZZTIME) ./api
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime $(FUZZTIME) ./api
	$(GO) test -run '^$$' -fuzz '^FuzzRenderOrderNotify$$' -fuzztime $(FUZZTIME) ./templates
	$(GO) test -run '^$$' -fuzz '^FuzzLookup$$' -fuzztime $(FUZZTIME) ./notify/poll

# Throughput and lateness figures: enqueue and drain rates over 20,000
# notifications, lateness of 10,000 spread over 5s, webhook sends per second.
bench:
	./scripts/ensure-redis
	$(GO) test -run '^$$' -bench 'Enqueue|Drain' -benchtime 20000x ./schedule
	$(GO) test -run '^$$' -bench 'Lateness' -benchtime 1x ./schedule
	$(GO) test -run '^$$' -bench . -benchtime 2s ./notify/webhook
