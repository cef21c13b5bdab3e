GO ?= go
# go.mod's toolchain line names the Go release sett is built and checked
# with (the oldest without a known vulnerability that reaches sett); auto
# lets the go command fetch it through the module proxy where an older
# one is installed, as a machine's go env may say local.
export GOTOOLCHAIN = auto
# The in-process benchmarks (bench-inproc) run sett and a real embedded etcd
# side by side in one process, each for BENCHTIME.
BENCHTIME ?= 2s
# Flags for the process benchmark's load generator (bench/load), e.g.
# BENCH_FLAGS='-scale 0.1' for a quick run; `bin/load -h` lists them.
BENCH_FLAGS ?=

# How long `make soak` churns, the TTL of its event leases (shortened
# from kube-apiserver's hour so that an hour's soak sees a dozen
# generations expire; 20s for a run of minutes), and extra flags
# (`bin/soak-run -h`).
SOAK_TIME ?= 1h
SOAK_EVENT_TTL ?= 5m
SOAK_FLAGS ?=

# How long `make fuzz` runs each fuzz target.
FUZZTIME ?= 3m

# A binary built with -race sleeps a second as it exits (the detector's
# atexit_sleep_ms), so that goroutines still running after main returns
# have time to race. make test runs some thirty race-built test binaries,
# and tests/ stops or runs the race-built sett over a hundred times: a
# second each, two minutes in all, for races that by then have little left to
# happen in. Go's own tests of the detector run with it at 0. Options of
# your own in $GORACE come after, and win.
RACE_ENV = GORACE="atexit_sleep_ms=0 $(GORACE)"

.PHONY: build run test vulncheck actionlint test-sett test-soak test-tikv bench bench-backup bench-inproc soak etcdctl clean k8s-storage k8s-storage-tikv e2e e2e-kine test-etcd-e2e fuzz image image-host release cross test-arm64 nemesis

# bin/sett says which commit it is (sett version), as a release does.
build:
	$(GO) build -ldflags '-X main.version=$(SETT_VERSION) -X main.commit=$(COMMIT)' -o bin/sett .

run: build
	./bin/sett serve --data-dir ./sett.data

# etcdctl, built from etcd's own module at the version pinned in
# testdata/etcdctl, for the tests that drive sett as an operator would.
etcdctl: bin/etcdctl
bin/etcdctl: testdata/etcdctl/go.mod testdata/etcdctl/go.sum
	cd testdata/etcdctl && GOWORK=off $(GO) build -o $(CURDIR)/bin/etcdctl go.etcd.io/etcd/etcdctl/v3

# Static, CGO-free sett binaries for the release and the image, one per
# platform (os/arch[/variant]), at bin/build/<os>-<arch>[-<variant>]/sett.
# Reproducible: -trimpath, no VCS stamp (it differs between a checkout and
# an archive of one), and the version and commit given with -X instead
# (sett version prints them). docs/INSTALL.md says why this and not
# GoReleaser.
SETT_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
STATIC_LDFLAGS = -s -w -X main.version=$(SETT_VERSION) -X main.commit=$(COMMIT)
static-bin = bin/build/$(subst /,-,$(1))/sett$(if $(filter windows/%,$(1)),.exe)
define build-static
	CGO_ENABLED=0 GOOS=$(word 1,$(subst /, ,$(1))) GOARCH=$(word 2,$(subst /, ,$(1))) GOARM=$(patsubst v%,%,$(word 3,$(subst /, ,$(1)))) \
		$(GO) build -trimpath -buildvcs=false -ldflags '$(STATIC_LDFLAGS)' -o $(call static-bin,$(1)) .

endef

# The release (docs/INSTALL.md): an archive per platform in bin/release
# (tar.gz; zip for Windows) holding sett, LICENSE and README.md, and
# SHA256SUMS over them, written by tools/release byte for byte the same
# from the same tree. SOURCE_DATE_EPOCH, if set, is the archives' time.
RELEASE_PLATFORMS = linux/amd64 linux/arm64 linux/arm/v7 darwin/amd64 darwin/arm64 windows/amd64
release:
	$(foreach p,$(RELEASE_PLATFORMS),$(call build-static,$(p)))
	rm -rf bin/release
	$(GO) run ./tools/release -out bin/release -version $(SETT_VERSION) -file LICENSE -file README.md \
		$(foreach p,$(RELEASE_PLATFORMS),$(p)=$(call static-bin,$(p)))

# The container image (docs/DEPLOY.md): a static, CGO-free sett on no
# base image for each of IMAGE_PLATFORMS, as an OCI image layout whose
# index lists them all (bin/sett-image) and the same as a tar
# (bin/sett-image.tar) for docker load, podman load or kind load
# image-archive. Built by tools/image, no Docker needed.
IMAGE_TAG ?= $(SETT_VERSION)
IMAGE_PLATFORMS = linux/amd64 linux/arm64 linux/arm/v7
image:
	$(foreach p,$(IMAGE_PLATFORMS),$(call build-static,$(p)))
	$(GO) run ./tools/image -out bin/sett-image -tar bin/sett-image.tar -tag $(IMAGE_TAG) \
		$(foreach p,$(IMAGE_PLATFORMS),$(p)=$(call static-bin,$(p)))

# The image for this machine's platform alone, which make test checks:
# building the other two cold takes minutes that make test has not got.
# make cross checks the whole image.
image-host:
	$(MAKE) image IMAGE_PLATFORMS=linux/$$($(GO) env GOARCH)

# Every platform sett ships for (docs/INSTALL.md), checked where make
# test cannot: go vet ./... for each (test files too, so each
# platform's build constraints are kept), sett linked for each, the
# multi-arch image checked whole, and the arm64 tests. .ci/run runs it
# after make test.
CROSS_PLATFORMS = $(RELEASE_PLATFORMS)
define cross-check
	GOOS=$(word 1,$(subst /, ,$(1))) GOARCH=$(word 2,$(subst /, ,$(1))) GOARM=$(patsubst v%,%,$(word 3,$(subst /, ,$(1)))) $(GO) vet ./...
	GOOS=$(word 1,$(subst /, ,$(1))) GOARCH=$(word 2,$(subst /, ,$(1))) GOARM=$(patsubst v%,%,$(word 3,$(subst /, ,$(1)))) $(GO) build -o /dev/null .

endef
cross: image
	$(foreach p,$(CROSS_PLATFORMS),$(call cross-check,$(p)))
	SETT_IMAGE=$(CURDIR)/bin/sett-image SETT_IMAGE_PLATFORMS='$(IMAGE_PLATFORMS)' $(GO) test -count=1 -run '^TestImage$$' ./tests
	$(MAKE) test-arm64

# The engine's, mvcc's and the server's tests built for linux/arm64 and
# run under qemu-user (qemu-aarch64-static, Debian's qemu-user-static),
# some four to six minutes on two cores. No -race: the race detector
# needs cgo, and a cross build has none. Skipped there: the trimmer's
# tests, since qemu-user does not pass madvise(MADV_PAGEOUT) on to the
# kernel; the power-cut test, which runs itself again as a child and so
# needs the kernel to run arm64 binaries itself (binfmt_misc); and
# TestWatchRequestProgressAfterEvents, which wants 2,000 progress
# notifications within 30s, a rate emulation beside mvcc's tests does
# not reach (it got 767).
QEMU_AARCH64 ?= qemu-aarch64-static
test-arm64:
	CGO_ENABLED=0 GOARCH=arm64 $(GO) test -exec $(QEMU_AARCH64) -count=1 -timeout 20m \
		-skip '^(TestTrim|TestPowerCut|TestWatchRequestProgressAfterEvents$$)' ./engine/badger ./mvcc ./server

# versitygw, a real S3 server (Apache-2.0), pinned in testdata/versitygw,
# for the tests of snapshots in S3.
bin/versitygw: testdata/versitygw/go.mod testdata/versitygw/go.sum
	cd testdata/versitygw && GOWORK=off CGO_ENABLED=0 $(GO) build -o $(CURDIR)/bin/versitygw github.com/versity/versitygw/cmd/versitygw

# govulncheck (golang.org/x/vuln) over sett's module, against the Go
# vulnerability database as of the golang.org/x/vulndb version pinned in
# testdata/vulncheck (its OSV files, indexed by its own indexdb), so that
# a known vulnerability in a dependency or the Go release that reaches
# sett's code turns make test red without a network beyond the module
# proxy. VULNDB=https://vuln.go.dev checks against the live database.
VULNDB ?= file://$(CURDIR)/bin/vulndb
vulncheck: bin/govulncheck bin/vulndb
	bin/govulncheck -db $(VULNDB) ./...

bin/govulncheck: testdata/vulncheck/go.mod testdata/vulncheck/go.sum
	cd testdata/vulncheck && GOWORK=off $(GO) build -o $(CURDIR)/bin/govulncheck golang.org/x/vuln/cmd/govulncheck

bin/vulndb: testdata/vulncheck/go.mod testdata/vulncheck/go.sum
	cd testdata/vulncheck && GOWORK=off $(GO) build -o $(CURDIR)/bin/indexdb golang.org/x/vulndb/cmd/indexdb
	rm -rf bin/vulndb
	bin/indexdb -out bin/vulndb -vulns "$$(cd testdata/vulncheck && GOWORK=off $(GO) list -m -f '{{.Dir}}' golang.org/x/vulndb)/data/osv"

# actionlint (github.com/rhysd/actionlint, at the version
# testdata/actionlint pins) over the GitHub workflows in .github/workflows.
actionlint: bin/actionlint
	bin/actionlint

bin/actionlint: testdata/actionlint/go.mod testdata/actionlint/go.sum
	cd testdata/actionlint && GOWORK=off $(GO) build -o $(CURDIR)/bin/actionlint github.com/rhysd/actionlint/cmd/actionlint

# sett's own packages under the race detector, and Kubernetes' storage
# suites against sett alone (k8s-storage K8S_SERVERS=sett), side by side:
# the suites mostly wait, so together they take little longer than the
# slower one. Against sett alone every failure counts, which is stricter
# than the comparison with etcd and keeps CI within its 20 minutes; `make
# k8s-storage` runs etcd beside it. test-tikv runs in the first free slot.
test: bin/etcdctl bin/etcd bin/kine bin/versitygw
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	$(MAKE) actionlint
	$(MAKE) vulncheck
	$(MAKE) -j2 --output-sync=target K8S_SERVERS=sett test-sett test-soak k8s-storage test-tikv

# tests/ runs the sett binary; it is built once, with the race detector.
# The soak (bench/soak) runs bin/sett, without it: the detector's own
# memory grows, and the soak measures sett's. Its churn and checks are
# the bench module's, not sett's packages, and run without it too: under
# the detector they cost make test minutes of CPU on a 2-core machine. tests/ is the longest
# package (7 minutes): listed first, it starts first, and the short ones
# fill the other slot meanwhile instead of holding it back to the end.
# The soak (3 minutes) is in the bench module, which ./... does not reach:
# test-soak runs it beside, as make test's -j2 schedules it.
TEST_ENV = SETT_BIN=$(CURDIR)/bin/sett-race SETT_SOAK_BIN=$(CURDIR)/bin/sett SETT_ETCDCTL=$(CURDIR)/bin/etcdctl SETT_ETCD=$(CURDIR)/bin/etcd SETT_KINE=$(CURDIR)/bin/kine SETT_VERSITYGW=$(CURDIR)/bin/versitygw \
	SETT_IMAGE=$(CURDIR)/bin/sett-image $(RACE_ENV)
test-sett: bin/etcdctl bin/etcd bin/kine bin/versitygw image-host build
	$(GO) build -race -o bin/sett-race .
	$(TEST_ENV) $(GO) test -race -count=1 -timeout 20m ./tests ./...

test-soak: build bin/etcd
	cd bench && $(TEST_ENV) $(GO) test -count=1 -timeout 20m ./soak

# The TiKV build (-tags tikv): vet, the engine's own tests, the election
# and failover tests (several members on one cluster), embed's start of a
# clustered member, and sett's
# differential test against etcd and the testdata/scripts, all on
# client-go's in-process mock cluster.
test-tikv:
	$(GO) vet -tags tikv ./...
	$(RACE_ENV) $(GO) test -race -count=1 -tags tikv -timeout 8m ./engine/tikv ./cluster ./embed
	$(RACE_ENV) $(GO) test -race -count=1 -tags tikv -timeout 8m -run '^(TestDifferential|TestDifferentialAuth|TestScripts)$$' ./server

# The process benchmark: bin/sett, a real etcd (bin/etcd), T4 (bin/t4) and
# kine over SQLite as k3s runs it (bin/kine),
# each run as their own process on fresh temp data dirs, driven by one
# load generator, which reads each server's CPU and memory from /proc.
bench: build bin/etcd bin/kine
	-$(MAKE) bin/t4
	cd bench && $(GO) build -o $(CURDIR)/bin/load ./load
	./bin/load -sett bin/sett -etcd bin/etcd -t4 bin/t4 -kine bin/kine \
		-servers $$(test -x bin/t4 && echo etcd,sett,t4,kine || echo etcd,sett,kine) $(BENCH_FLAGS)

# The continuous backup's workloads (issue 28), sett's alone, with
# versitygw as the S3 it ships to every second: the backup's cost under
# the mixed load (backup-cost), its lag at 1,000 writes a second
# (backup-lag), and a restore from deltas against one from a full
# snapshot (backup-restore). Not in `make bench`: they take about 7
# minutes at scale 1. BENCH_FLAGS='-only backup-lag' runs one alone.
bench-backup: build bin/versitygw
	cd bench && $(GO) build -o $(CURDIR)/bin/load ./load
	./bin/load -sett bin/sett -versitygw bin/versitygw -servers sett -only backup \
		-workload-timeout 30m -timeout 1h $(BENCH_FLAGS)

# T4 (github.com/t4db/t4, v1.1.17 as pinned in testdata/t4), a key-value
# database on object storage that speaks the etcd v3 API (several nodes
# elect a leader through an S3 lock), run by `make bench` as a third
# server, one node without S3, where it builds.
bin/t4: testdata/t4/go.mod testdata/t4/go.sum
	cd testdata/t4 && GOWORK=off $(GO) build -o $(CURDIR)/bin/t4 github.com/t4db/t4/cmd/t4

# The soak (bench/soak): bin/sett and a real etcd, each as its own
# process in both configurations (kube-apiserver compacting, and k3s's
# periodic auto-compaction), all at once under a small cluster's churn
# for SOAK_TIME; fails if a figure of sett's grows or a check fails.
# Samples and charts land in bin/soak/. make test runs three minutes of
# it against sett alone (bench/soak's TestSoak). A run under 20 minutes
# takes make test's shorter intervals.
soak: build bin/etcd
	cd bench && $(GO) build -o $(CURDIR)/bin/soak-run ./soak
	./bin/soak-run -sett bin/sett -etcd bin/etcd -duration $(SOAK_TIME) -event-ttl $(SOAK_EVENT_TTL) -out bin/soak $(SOAK_FLAGS)

# The etcd server, v3.7.3 as pinned in testdata/etcd, built from etcd's own
# main package (see testdata/etcd/go.mod).
bin/etcd: testdata/etcd/go.mod testdata/etcd/go.sum testdata/etcd/main.go
	cd testdata/etcd && GOWORK=off $(GO) build -o $(CURDIR)/bin/etcd .

# kine, v0.17.5 as pinned in testdata/kine, for the tests of sett import
# kine; built without cgo, so its SQLite is modernc.org/sqlite, as sett's.
bin/kine: testdata/kine/go.mod testdata/kine/go.sum testdata/kine/main.go
	cd testdata/kine && GOWORK=off CGO_ENABLED=0 $(GO) build -o $(CURDIR)/bin/kine .

# The go test benchmarks, sett and an embedded etcd in one process.
bench-inproc:
	cd bench && $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem -timeout 30m .

# Kubernetes' own storage tests (k8s.io/apiserver's pkg/storage/etcd3 and
# pkg/storage/cacher), run against sett and against an embedded etcd; fails
# if a test passes against etcd but not against sett. K8S_RUN, K8S_FLAGS
# (e.g. -race) and the others that testdata/k8s/run.sh lists narrow or
# change the run; K8S_SERVERS lists the servers (run.sh's arguments).
K8S_SERVERS ?= etcd sett
k8s-storage:
	GO=$(GO) testdata/k8s/run.sh $(K8S_SERVERS)

# The same suites (built with -tags tikv) against sett on TiKV's
# in-process mock cluster: one sett (tikv), and three clustered members on
# one mock cluster with the client's requests spread over them (tikv3),
# each compared with etcd's run of the same binary. Not part of `test`: on
# a machine loaded far past its cores the members' 2s election lease can
# run out, and tests then fail on "no leader" (docs/CLUSTERING.md).
k8s-storage-tikv:
	GO=$(GO) testdata/k8s/run.sh etcd tikv tikv3

# A real control plane on sett: kube-apiserver, kube-controller-manager and
# kubectl built from k8s.io/kubernetes (pinned in testdata/e2e/k8s), driven
# through namespaces, bulk objects, paging, patches, a deployment, a CRD,
# server-side apply, watches, namespace deletion and compaction. Not part of
# `test`: the first build of the Kubernetes binaries takes minutes.
# e2e-kine moves such a kube-apiserver from kine (bin/kine on SQLite) to
# sett by the k3s runbook in docs/DEPLOY.md and checks that its objects and a
# watch from before the move carry over; e2e runs it after the first.
e2e:
	GO=$(GO) testdata/e2e/run.sh
	GO=$(GO) testdata/e2e/kine.sh

e2e-kine:
	GO=$(GO) testdata/e2e/kine.sh

# etcd's own end-to-end suites (go.etcd.io/etcd/tests/v3, packages e2e and
# common, at the version testdata/etcd-e2e pins), every single-member test,
# run against a real etcd and against sett installed as `etcd` beside
# etcd's etcdctl and etcdutl, side by side; fails if a test passes against
# etcd but not against sett. The summary lands in bin/etcd-e2e/summary.txt.
# Not part of `test`: it runs for an hour or more. E2E_RUN, E2E_TIMEOUT and
# the others that testdata/etcd-e2e/run.sh lists narrow or change the run;
# E2E_SERVERS lists the servers (run.sh's arguments).
E2E_SERVERS ?= etcd sett
test-etcd-e2e: build bin/etcd
	GO=$(GO) testdata/etcd-e2e/run.sh $(E2E_SERVERS)

# The fuzz targets, each for FUZZTIME. `make test` runs only their seeds
# (in the tests, and the inputs that once failed under testdata/fuzz).
# New failing inputs land in the package's testdata/fuzz/; keep them.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzKeyEncoding$$' -fuzztime $(FUZZTIME) ./mvcc
	$(GO) test -run '^$$' -fuzz '^FuzzKV$$' -fuzztime $(FUZZTIME) ./server
	$(GO) test -run '^$$' -fuzz '^FuzzOverlaps$$' -fuzztime $(FUZZTIME) ./server
	$(GO) test -run '^$$' -fuzz '^FuzzWatchStream$$' -fuzztime $(FUZZTIME) ./server
	$(GO) test -run '^$$' -fuzz '^FuzzSnapshotFile$$' -fuzztime $(FUZZTIME) ./snapshot

# The nemesis run (cluster's TestNemesis: three members on one engine,
# clients on every member, faults at random, the history checked with
# porcupine and against the log) for NEMESIS_TIME, on Badger and then on
# TiKV's mock cluster. `make test` runs it for a minute on Badger and 30s
# on the mock. A failing run logs its seed: NEMESIS_SEED=<seed> replays
# its fault schedule, NEMESIS_FAULTS picks fault kinds (see the test).
NEMESIS_TIME ?= 10m
nemesis:
	NEMESIS_TIME=$(NEMESIS_TIME) $(GO) test -race -count=1 -timeout 0 -v -run '^TestNemesis$$' ./cluster
	NEMESIS_TIME=$(NEMESIS_TIME) $(GO) test -race -count=1 -timeout 0 -v -tags tikv -run '^TestNemesis$$' ./cluster

clean:
	rm -rf bin
