GO ?= go
# Benchmarks run sett and a real embedded etcd side by side in one process.
BENCHTIME ?= 2s

.PHONY: build run test test-sett bench etcdctl clean k8s-storage e2e

build:
	$(GO) build -o bin/sett .

run: build
	./bin/sett serve --data-dir ./sett.data

# etcdctl, built from etcd's own module at the version pinned in
# testdata/etcdctl, for the tests that drive sett as an operator would.
etcdctl: bin/etcdctl
bin/etcdctl: testdata/etcdctl/go.mod testdata/etcdctl/go.sum
	cd testdata/etcdctl && GOWORK=off $(GO) build -o $(CURDIR)/bin/etcdctl go.etcd.io/etcd/etcdctl/v3

# sett's own packages under the race detector, and Kubernetes' storage
# suites against sett and etcd (k8s-storage), side by side: the suites
# mostly wait, so together they take little longer than the slower one.
test: bin/etcdctl
	$(GO) vet ./...
	$(MAKE) -j2 --output-sync=target test-sett k8s-storage

test-sett: bin/etcdctl
	SETT_ETCDCTL=$(CURDIR)/bin/etcdctl $(GO) test -race -count=1 -timeout 14m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem -timeout 30m ./bench/

# Kubernetes' own storage tests (k8s.io/apiserver's pkg/storage/etcd3 and
# pkg/storage/cacher), run against sett and against an embedded etcd; fails
# if a test passes against etcd but not against sett. K8S_RUN, K8S_FLAGS
# (e.g. -race) and the others that testdata/k8s/run.sh lists narrow or
# change the run.
k8s-storage:
	GO=$(GO) testdata/k8s/run.sh

# A real control plane on sett: kube-apiserver, kube-controller-manager and
# kubectl built from k8s.io/kubernetes (pinned in testdata/e2e/k8s), driven
# through namespaces, bulk objects, paging, patches, a deployment, a CRD,
# server-side apply, watches, namespace deletion and compaction. Not part of
# `test`: the first build of the Kubernetes binaries takes minutes.
e2e:
	GO=$(GO) testdata/e2e/run.sh

clean:
	rm -rf bin
