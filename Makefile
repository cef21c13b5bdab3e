GO ?= go
# Benchmarks run sett and a real embedded etcd side by side in one process.
BENCHTIME ?= 2s

.PHONY: build run test bench etcdctl clean

build:
	$(GO) build -o bin/sett .

run: build
	./bin/sett serve --data-dir ./sett.data

# etcdctl, built from etcd's own module at the version pinned in
# testdata/etcdctl, for the tests that drive sett as an operator would.
etcdctl: bin/etcdctl
bin/etcdctl: testdata/etcdctl/go.mod testdata/etcdctl/go.sum
	cd testdata/etcdctl && GOWORK=off $(GO) build -o $(CURDIR)/bin/etcdctl go.etcd.io/etcd/etcdctl/v3

test: bin/etcdctl
	$(GO) vet ./...
	SETT_ETCDCTL=$(CURDIR)/bin/etcdctl $(GO) test -race -count=1 -timeout 14m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem -timeout 30m ./bench/

clean:
	rm -rf bin
