#!/usr/bin/env bash
# Runs Kubernetes' own storage tests (k8s.io/apiserver's pkg/storage/etcd3
# and pkg/storage/cacher) against sett and against a real embedded etcd,
# and compares them: every test that passes against etcd must pass against
# sett.
#
# No upstream code is kept in the repository. At run time the script copies
# k8s.io/apiserver from the Go module cache into two git-ignored folders:
#   work/etcd  unmodified: its testserver starts an embedded etcd;
#   work/sett  with pkg/storage/etcd3/testserver/test_server.go replaced by
#              testserver.go.sett, which starts sett in the test process.
# Both copies get the same go.mod (k8s.io/apiserver's plus a requirement on
# sett, replaced by the local source), so both runs build against the same
# versions of etcd's client, gRPC and everything else.
#
# Usage: testdata/k8s/run.sh [both|sett|etcd]      (default both)
# Environment:
#   K8S_APISERVER_VERSION  k8s.io/apiserver version (default v0.37.2)
#   K8S_SUITES             suites to run, of: etcd3 cacher (default both)
#   K8S_RUN                go test -run pattern (default: all tests)
#   K8S_SKIP               go test -skip pattern (default: none)
#   K8S_TIMEOUT            go test -timeout per suite (default 30m)
#   K8S_FLAGS              extra go test flags, e.g. -race or -v
#   SETT_SRC               the sett source to test (default: this checkout)
#   SETT_K8S_INMEMORY=1    run sett on an in-memory Badger (no fsync), as
#                          the etcd test server runs with UnsafeNoFsync
#   SETT_K8S_LOG=1         send sett's warnings to the test log
# Results (go test -json) land in testdata/k8s/work/results/; the summary is
# printed at the end. The exit status is 1 when a test passes against etcd
# but not against sett.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
version=${K8S_APISERVER_VERSION:-v0.37.2}
suites=${K8S_SUITES:-etcd3 cacher}
timeout=${K8S_TIMEOUT:-30m}
sett_src=$(cd "${SETT_SRC:-$root}" && pwd)
work=$here/work
backends=${1:-both}
case $backends in
both) backends="etcd sett" ;;
sett | etcd) ;;
*) echo "usage: $0 [both|sett|etcd]" >&2; exit 2 ;;
esac
export GOWORK=off GOFLAGS=${GOFLAGS:-}

pkg_of() {
	case $1 in
	etcd3) echo ./pkg/storage/etcd3 ;;
	cacher) echo ./pkg/storage/cacher ;;
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

# 2. Two copies. The go.mod is made once per (apiserver version, sett
#    go.mod) and kept in work/, because tidying it takes a while.
stamp="$version $(sha256sum "$sett_src/go.mod" | cut -d' ' -f1) $sett_src"
if [ ! -f "$work/go.mod.stamp" ] || [ "$(cat "$work/go.mod.stamp")" != "$stamp" ]; then
	step "go.mod: k8s.io/apiserver's, requiring sett at $sett_src"
	rm -rf "$work/mod" && mkdir -p "$work/mod"
	cp "$src/go.mod" "$src/go.sum" "$work/mod/"
	chmod u+w "$work/mod/go.mod" "$work/mod/go.sum"
	# tidy needs the whole module to see which requirements stay.
	rm -rf "$work/sett" && cp -r "$src" "$work/sett" && chmod -R u+w "$work/sett"
	cp "$here/testserver.go.sett" "$work/sett/pkg/storage/etcd3/testserver/test_server.go"
	(cd "$work/sett" &&
		"$GO" mod edit -require=github.com/settdb/sett@v0.0.0-00010101000000-000000000000 \
			-replace=github.com/settdb/sett="$sett_src" &&
		"$GO" mod tidy)
	cp "$work/sett/go.mod" "$work/sett/go.sum" "$work/mod/"
	echo "$stamp" >"$work/go.mod.stamp"
fi
for b in etcd sett; do
	rm -rf "$work/$b"
	cp -r "$src" "$work/$b"
	chmod -R u+w "$work/$b"
	cp "$work/mod/go.mod" "$work/mod/go.sum" "$work/$b/"
done
cp "$here/testserver.go.sett" "$work/sett/pkg/storage/etcd3/testserver/test_server.go"

# 3. The tests, one suite and backend at a time: the machine is small and
#    both backends compete for it otherwise.
mkdir -p "$work/results"
flags=(-count=1 -timeout "$timeout" -json)
[ -n "${K8S_RUN:-}" ] && flags+=(-run "$K8S_RUN")
[ -n "${K8S_SKIP:-}" ] && flags+=(-skip "$K8S_SKIP")
# shellcheck disable=SC2206
[ -n "${K8S_FLAGS:-}" ] && flags+=($K8S_FLAGS)
for suite in $suites; do
	pkg=$(pkg_of "$suite")
	for b in $backends; do
		out=$work/results/$b-$suite.json
		step "$suite against $b: go test ${flags[*]} $pkg"
		t0=$(date +%s)
		(cd "$work/$b" && "$GO" test "${flags[@]}" "$pkg" >"$out" 2>"$out.stderr") || true
		step "$suite against $b: $(($(date +%s) - t0))s"
	done
done

# 4. The counts and the comparison.
step "total $(($(date +%s) - start))s"
cd "$root"
results=()
for suite in $suites; do for b in $backends; do results+=("$work/results/$b-$suite.json"); done; done
exec "$GO" run "$here/summary.go" "${results[@]}"
