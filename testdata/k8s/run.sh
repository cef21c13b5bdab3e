#!/usr/bin/env bash
# Runs Kubernetes' own storage tests (k8s.io/apiserver's pkg/storage/etcd3
# and pkg/storage/cacher) against sett and against a real embedded etcd,
# and compares them: every test that passes against etcd must pass against
# sett.
#
# No upstream code is kept in the repository. At run time the script copies
# k8s.io/apiserver from the Go module cache into a git-ignored folder,
# work/src, replaces pkg/storage/etcd3/testserver/test_server.go with
# testserver.go.sett (which starts sett in the test process, or a real
# embedded etcd when SETT_K8S_BACKEND=etcd), and requires sett from the
# local source. Each suite is built once and run against both servers, all
# runs at the same time: the tests spend most of their time waiting.
#
# Usage: testdata/k8s/run.sh [both | SERVER...]      (default both)
# where both is etcd and sett, and a SERVER is one of
#   etcd    a real embedded etcd
#   sett    one sett on Badger (or as SETT_K8S_ENGINE and
#           SETT_K8S_MEMBERS below say)
#   tikv    one sett on TiKV's in-process mock cluster, as
#           sett serve --engine tikv --tikv-pd-endpoints mock://DIR
#   tikvN   N clustered sett members on one mock cluster (e.g. tikv3),
#           the client given every member's URL (clientv3 spreads its
#           calls over them round-robin)
# The tikv servers need the tests built with -tags tikv, which the script
# adds when one of them is asked for or SETT_K8S_ENGINE=tikv.
# Environment:
#   K8S_APISERVER_VERSION  k8s.io/apiserver version (default v0.37.2)
#   K8S_SUITES             suites to run, of: etcd3 cacher (default both)
#   K8S_RUN                -run pattern (default: all tests)
#   K8S_SKIP               -skip pattern (default: none)
#   K8S_TIMEOUT            -timeout per run (default 20m)
#   K8S_FLAGS              extra go test build flags, e.g. -race
#   SETT_SRC               the sett source to test (default: this checkout)
#   SETT_K8S_INMEMORY=1    run sett without fsync (a mock cluster in memory), as
#                          the etcd test server runs with UnsafeNoFsync
#   SETT_K8S_LOG=1         send sett's warnings to the test log
#   SETT_K8S_ENGINE        badger (default) or tikv, for the sett server
#   SETT_K8S_MEMBERS       how many members the sett server runs (default
#                          1; more need SETT_K8S_ENGINE=tikv)
#   SETT_K8S_ELECTION_LEASE  the members' election lease (default sett's,
#                          2s); with -race on the mock cluster, use 10s
# Results (go test -json) land in testdata/k8s/work/results/; the summary is
# printed at the end. The exit status is 1 when a test passes against etcd
# but not against sett.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
version=${K8S_APISERVER_VERSION:-v0.37.2}
suites=${K8S_SUITES:-etcd3 cacher}
timeout=${K8S_TIMEOUT:-20m}
sett_src=$(cd "${SETT_SRC:-$root}" && pwd)
work=$here/work
backends=${*:-both}
[ "$backends" = both ] && backends="etcd sett"
tags=
[ "${SETT_K8S_ENGINE:-}" = tikv ] && tags=tikv
for b in $backends; do
	case $b in
	sett | etcd) ;;
	tikv | tikv[1-9] | tikv[1-9][0-9]) tags=tikv ;;
	*) echo "usage: $0 [both | etcd | sett | tikv | tikvN ...]" >&2; exit 2 ;;
	esac
done
export GOWORK=off

pkg_of() {
	case $1 in
	etcd3) echo pkg/storage/etcd3 ;;
	cacher) echo pkg/storage/cacher ;;
	*) echo "unknown suite $1 (want etcd3 or cacher)" >&2; exit 2 ;;
	esac
}

step() { printf '== %s\n' "$*" >&2; }

mkdir -p "$work"
start=$(date +%s)

# 1. The upstream module, from the module cache (downloaded if missing).
step "k8s.io/apiserver@$version"
src=$(cd "$work" && "$GO" mod download -json "k8s.io/apiserver@$version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "k8s.io/apiserver@$version: not in the module cache" >&2; exit 1; }

# 2. The copy. Its go.mod is upstream's plus sett; -mod=mod lets the
#    build add what sett needs beyond it. The result is kept in work/ per
#    (apiserver version, sett go.mod), so later runs skip the resolving.
rm -rf "$work/src"
cp -r "$src" "$work/src"
chmod -R u+w "$work/src"
cp "$here/testserver.go.sett" "$work/src/pkg/storage/etcd3/testserver/test_server.go"
cp "$here/tikv.go.sett" "$work/src/pkg/storage/etcd3/testserver/tikv.go"
stamp="$version $(sha256sum "$sett_src/go.mod" | cut -d' ' -f1) $sett_src"
if [ -f "$work/go.mod.stamp" ] && [ "$(cat "$work/go.mod.stamp")" = "$stamp" ]; then
	cp "$work/go.mod.kept" "$work/src/go.mod"
	cp "$work/go.sum.kept" "$work/src/go.sum"
else
	(cd "$work/src" &&
		"$GO" mod edit -require=github.com/settdb/sett@v0.0.0-00010101000000-000000000000 \
			-replace=github.com/settdb/sett="$sett_src")
fi

# 3. One test binary per suite.
mkdir -p "$work/bin" "$work/results"
for suite in $suites; do
	pkg=$(pkg_of "$suite")
	step "build $suite"
	# shellcheck disable=SC2086
	(cd "$work/src" && "$GO" test -mod=mod -c ${tags:+-tags $tags} ${K8S_FLAGS:-} -o "$work/bin/$suite.test" "./$pkg")
done
cp "$work/src/go.mod" "$work/go.mod.kept"
cp "$work/src/go.sum" "$work/go.sum.kept"
echo "$stamp" >"$work/go.mod.stamp"

# 4. Every suite against every backend, at once.
flags=(-test.v=test2json -test.count=1 -test.timeout="$timeout")
[ -n "${K8S_RUN:-}" ] && flags+=(-test.run="$K8S_RUN")
[ -n "${K8S_SKIP:-}" ] && flags+=(-test.skip="$K8S_SKIP")
pids=()
for suite in $suites; do
	pkg=$(pkg_of "$suite")
	for b in $backends; do
		out=$work/results/$b-$suite.json
		step "$suite against $b"
		# Each tikv server is sett with the engine and members set.
		env=(SETT_K8S_BACKEND="$b")
		case $b in
		tikv) env=(SETT_K8S_BACKEND=sett SETT_K8S_ENGINE=tikv SETT_K8S_MEMBERS=1) ;;
		tikv*) env=(SETT_K8S_BACKEND=sett SETT_K8S_ENGINE=tikv SETT_K8S_MEMBERS="${b#tikv}") ;;
		esac
		(
			cd "$work/src/$pkg" &&
				env "${env[@]}" "$GO" tool test2json -t -p "k8s.io/apiserver/$pkg" \
					"$work/bin/$suite.test" "${flags[@]}" >"$out" 2>"$out.stderr" || true
			step "$suite against $b: done after $(($(date +%s) - start))s"
		) &
		pids+=($!)
	done
done
wait "${pids[@]}"

# 5. The counts and the comparison.
step "total $(($(date +%s) - start))s"
cd "$root"
results=()
for suite in $suites; do for b in $backends; do results+=("$work/results/$b-$suite.json"); done; done
exec "$GO" run "$here/summary.go" "${results[@]}"
