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

bench:
	./scripts/ensure-redis
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
