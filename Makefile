GO ?= go
# Benchmarks run sett and a real embedded etcd side by side in one process.
BENCHTIME ?= 2s

.PHONY: build run test bench etcdctl clean k8s-storage

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

# Kubernetes' own storage tests (k8s.io/apiserver's pkg/storage/etcd3 and
# pkg/storage/cacher), run against sett and against an embedded etcd; fails
# if a test passes against etcd but not against sett. Not part of `test`:
# it takes several minutes. K8S_RUN, K8S_FLAGS (e.g. -race) and the others
# that testdata/k8s/run.sh lists narrow or change the run.
k8s-storage:
	GO=$(GO) testdata/k8s/run.sh

clean:
	rm -rf bin
