#!/usr/bin/env bash
# Runs etcd's own end-to-end suites (go.etcd.io/etcd/tests/v3, packages
# e2e and common, -tags e2e, at the version go.mod pins) against a real
# etcd and against sett installed as `etcd`, side by side, and compares
# them: the tests that pass against etcd but not against sett are listed.
#
# Only single-member cases count. Each server's bin dir holds etcd.sh as
# `etcd` (see there), which starts no member of a cluster of more than one
# member; the tests that tried (the suites' 3-member cases, member add,
# failover, ...) are set apart as needing peers, for both servers.
#
# No upstream code is kept here: the suites are built from the module
# cache with `go test -c`, and run from a tree under bin/etcd-e2e that
# stands where they expect to be (tests/e2e, tests/common, tests/fixtures
# from the module, and etcd.conf.yml.sample, which the module does not
# ship: sample.yml here stands in for it).
#
# Each top-level test runs on its own (one process per test and server,
# with a timeout), in its own network namespace when unshare works (the
# framework listens on fixed ports, 20000 and up, so two runs at once
# would collide otherwise; without it the run is serial).
#
# Usage: testdata/etcd-e2e/run.sh [SERVER...]    (default: etcd sett)
# where SERVER is etcd (bin/etcd, built by `make bin/etcd`) or sett
# (bin/sett, built by `make build`, or $SETT_BIN).
# Environment:
#   E2E_SUITES    suites to run, of: e2e common (default both)
#   E2E_RUN       regexp of the top-level tests to run (default all)
#   E2E_TIMEOUT   timeout of one top-level test (default 2m; against
#                 etcd on 2 loaded cores none that passes took 30s)
#   E2E_PARALLEL  test processes at once (default 2)
#   E2E_OUT       where results go (default bin/etcd-e2e)
#   SETT_BIN      the sett binary to run as etcd (default bin/sett)
#   E2E_KEEP=1    keep the results of earlier runs in $E2E_OUT (to run
#                 a few tests again: E2E_RUN names them)
# The summary is printed and written to $E2E_OUT/summary.txt; the exit
# status is 1 when a test passes against etcd but not against sett.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
suites=${E2E_SUITES:-e2e common}
run=${E2E_RUN:-.}
timeout=${E2E_TIMEOUT:-2m}
parallel=${E2E_PARALLEL:-2}
out=${E2E_OUT:-$root/bin/etcd-e2e}
servers=${*:-etcd sett}
export GOWORK=off

step() { printf '== %s\n' "$*" >&2; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
step "building etcd's suites, etcdctl and etcdutl (testdata/etcd-e2e/go.mod)"
(
	cd "$here"
	for s in $suites; do
		"$GO" test -c -tags e2e -o "$out/$s.test" "go.etcd.io/etcd/tests/v3/$s"
	done
	"$GO" build -o "$out/etcdctl" go.etcd.io/etcd/etcdctl/v3
	"$GO" build -o "$out/etcdutl" go.etcd.io/etcd/etcdutl/v3
)
module=$(cd "$here" && "$GO" list -m -f '{{.Dir}}' go.etcd.io/etcd/tests/v3)

for s in $servers; do
	case $s in
	etcd) bin=$root/bin/etcd ;;
	sett) bin=${SETT_BIN:-$root/bin/sett} ;;
	*) echo "usage: $0 [etcd | sett ...]" >&2; exit 2 ;;
	esac
	[ -x "$bin" ] || { echo "$bin missing: make bin/etcd build" >&2; exit 2; }
	bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
	d=$out/$s
	[ "${E2E_KEEP:-}" = 1 ] || rm -rf "$d"
	mkdir -p "$d/bin" "$d/tree/tests/e2e" "$d/tree/tests/common" "$d/results"
	cp "$here/etcd.sh" "$d/bin/etcd.new" && mv "$d/bin/etcd.new" "$d/bin/etcd"
	ln -sfn "$bin" "$d/bin/etcd.real"
	ln -sfn "$out/etcdctl" "$d/bin/etcdctl"
	ln -sfn "$out/etcdutl" "$d/bin/etcdutl"
	ln -sfn "$module/fixtures" "$d/tree/tests/fixtures"
	cp "$here/sample.yml" "$d/tree/etcd.conf.yml.sample"
done

netns=
if unshare -n true 2>/dev/null; then
	netns=1
elif [ "$parallel" -gt 1 ]; then
	step "unshare -n fails: running one test at a time"
	parallel=1
fi

# run_one SUITE SERVER TEST runs one top-level test against one server.
run_one() {
	local suite=$1 server=$2 test=$3 d=$out/$2
	# Short: tests put unix sockets in it (at most 108 bytes a path).
	local tmp
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/e2e.XXXXXX")
	printf '%s\n' "$tmp" >"$d/results/$suite.$test.tmp"
	local cmd=(env TMPDIR="$tmp" GOTMPDIR="$tmp" E2E_TEST_MINIMAL=1
		timeout -k 30s "$(( $(to_seconds "$timeout") + 120 ))"
		"$out/$suite.test" -test.run "^$test\$" -test.v=test2json -test.count=1
		-test.timeout "$timeout" --bin-dir "$d/bin")
	if [ -n "$netns" ]; then
		cmd=(unshare -n sh -c 'ip link set lo up && exec "$@"' sh "${cmd[@]}")
	fi
	(cd "$d/tree/tests/$suite" && "${cmd[@]}" 2>&1) |
		"$GO" tool test2json -t -p "$suite" >"$d/results/$suite.$test.json" || true
	# A test killed by its timeout leaves its servers running: end them.
	local pids
	pids=$(pgrep -f -- "$tmp" || true)
	[ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
	rm -rf "$tmp"
	printf '%s %-5s %s\n' "$(date +%T)" "$server" "$suite.$test" >&2
}
to_seconds() {
	case $1 in
	*m) echo $(( ${1%m} * 60 )) ;;
	*s) echo "${1%s}" ;;
	*) echo "$1" ;;
	esac
}
export -f run_one to_seconds
export out timeout netns GO

start=$(date +%s)
for suite in $suites; do
	for test in $("$out/$suite.test" -test.list "$run" | grep '^Test'); do
		for s in $servers; do printf '%s %s %s\n' "$suite" "$s" "$test"; done
	done
done >"$out/jobs"
step "running $(wc -l <"$out/jobs") test runs, $parallel at a time, each within $timeout"
xargs -P "$parallel" -L 1 bash -c 'run_one "$@"' sh <"$out/jobs"
step "ran in $(( ($(date +%s) - start) / 60 )) min"

# The summary compares every server with results here, etcd first: one
# server's run is compared with the other's last one.
compared=
for s in etcd sett; do [ -d "$out/$s/results" ] && compared="$compared $s"; done
cd "$here"
exec "$GO" run summary.go -out "$out" $compared
