GO ?= go
# Benchmarks run sett and a real embedded etcd side by side in one process.
BENCHTIME ?= 2s

.PHONY: build run test bench etcdctl clean

build:
	$(GO) build -o bin/sett .

run: build
	./bin/sett serve --data-dir ./sett.data

# etcdctl, built from etcd's own module at the version sett speaks, for the
# tests that drive sett the way an operator would.
etcdctl: bin/etcdctl
bin/etcdctl:
	GOBIN=$(CURDIR)/bin $(GO) install go.etcd.io/etcd/etcdctl/v3@v3.7.3

test: bin/etcdctl
	$(GO) vet ./...
	SETT_ETCDCTL=$(CURDIR)/bin/etcdctl $(GO) test -race -count=1 -timeout 14m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem -timeout 30m ./bench/

clean:
	rm -rf bin
