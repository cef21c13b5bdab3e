#!/usr/bin/env bash
# Moves a real kube-apiserver from kine to sett, as docs/DEPLOY.md's k3s
# runbook does: kube-apiserver (k8s.io/kubernetes, pinned in k8s/go.mod) on
# kine (bin/kine, pinned in testdata/kine) on SQLite with k3s's parameters,
# objects created, kube-apiserver and kine stopped, `sett import kine`,
# sett started at kine's address, kube-apiserver started again on it. The
# checks: everything is listed with the resourceVersions it had, and a watch
# from a resourceVersion taken before the move replays what changed since
# and goes on with what is written after it, with no 410 Gone.
#
# kube-apiserver runs with --watch-cache=false. A kube-apiserver that
# restarts fills its watch cache from a list at the store's current
# revision and answers a watch from any earlier resourceVersion with 410
# Gone, on etcd as on any store; without the cache a watch is the store's
# own watch, which is what the move has to keep.
#
# Same conventions as run.sh: `ok - NAME` or `not ok - NAME` per check, then
# `N passed, M failed`; the run's folder under work/ is kept when a check
# failed. E2E_KEEP=1 keeps it always; E2E_TIMEOUT (seconds, default 600)
# bounds the scenario.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}

. "$here/lib.sh"

build_binaries build etcdctl bin/kine

run=$(mktemp -d "$work/kine.XXXXXX")
read -r store_port api_port metrics_port <<<"$(free_ports 3)"
# kine listens where k3s would have pointed kube-apiserver, and sett takes
# the same address after the move, so kube-apiserver's flags do not change
# (plain gRPC on loopback, as k3s talks to its own kine).
store_url=http://127.0.0.1:$store_port
# The DSN k3s gives kine for its default SQLite database.
db=$run/state.db
endpoint="sqlite://$db?_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate"
make_credentials

k() { "$bin/kubectl" --kubeconfig="$kubeconfig" --cache-dir="$run/kubectl-cache" --request-timeout=60s "$@"; }
etcdctl() { "$root/bin/etcdctl" --endpoints="$store_url" --command-timeout=30s "$@"; }
api() { curl -sk -H "Authorization: Bearer $token" "https://127.0.0.1:$api_port$1"; }

# objects: every object the scenario made, with its resourceVersion.
objects() {
	k get namespaces,configmaps,secrets,deployments,events -A --no-headers \
		-o custom-columns='KIND:.kind,NS:.metadata.namespace,NAME:.metadata.name,RV:.metadata.resourceVersion' |
		grep -E '\smv-[ab]\s|^Namespace\s+<none>\s+mv-' | sort
}

step "kine on 127.0.0.1:$store_port ($db)"
# --compact-min-retain 0: kine compacts where it is asked to (below).
start kine "$root/bin/kine" --endpoint "$endpoint" --listen-address "127.0.0.1:$store_port" \
	--metrics-bind-address 0 --compact-min-retain 0
# kine answers no alarm list, which etcdctl's endpoint health asks for.
wait_for 30 kine etcdctl get --limit 1 --keys-only /
start_apiserver kube-apiserver-on-kine --etcd-servers="$store_url" --watch-cache=false

begin_scenario

# On kine: two namespaces, configmaps, secrets, a deployment, an event
# (kube-apiserver stores events under a lease, which kine names by its TTL).
cm_yaml() {
	local i
	for i in $(seq 0 29); do
		printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d, namespace: mv-a}\ndata: {index: "%d"}\n---\n' "$i" "$i"
	done
}
t_on_kine() {
	k create namespace mv-a >/dev/null
	k create namespace mv-b >/dev/null
	cm_yaml >"$run/cm.yaml"
	k apply -f "$run/cm.yaml" >/dev/null
	for i in $(seq 0 9); do k create secret generic "s-$i" -n mv-b --from-literal=password="p$i" >/dev/null; done
	k create deployment web -n mv-a --image=registry.k8s.io/pause:3.10 --replicas=2 >/dev/null
	k create -f - >/dev/null <<EOF
apiVersion: v1
kind: Event
metadata: {name: moved.1, namespace: mv-a}
involvedObject: {kind: ConfigMap, namespace: mv-a, name: cm-0}
reason: Moving
message: written on kine
type: Normal
EOF
	expect configmaps "$(k get configmaps -n mv-a -o name | grep -c '^configmap/cm-')" 30
}
check "namespaces, 30 configmaps, 10 secrets, a deployment and an event on kine" t_on_kine

# A compaction, so that the import has history to drop below it.
compacted=$(($(etcdctl get / --prefix --keys-only --limit 1 -w json | jq .header.revision) - 10))
t_compact_kine() { etcdctl compact "$compacted"; }
check "kine compacted at $compacted" t_compact_kine

# The resourceVersion a client's list returned before the move; then more
# writes, which a watch from it must replay.
rv0=$(api /api/v1/namespaces/mv-a/configmaps | jq -r .metadata.resourceVersion)
t_after_rv0() {
	[ "$rv0" -gt 0 ]
	k create configmap before-move -n mv-a --from-literal=at=kine >/dev/null
	k patch configmap cm-0 -n mv-a --type=merge -p '{"data":{"index":"patched on kine"}}' >/dev/null
	k delete configmap cm-1 -n mv-a >/dev/null
}
check "list at resourceVersion $rv0, then a create, a patch and a delete" t_after_rv0
objects >"$run/before.txt"
last_rv=$(awk '{ print $4 }' "$run/before.txt" | sort -n | tail -1)

step "stopping kube-apiserver and kine"
stop kube-apiserver-on-kine
stop kine

t_import() {
	"$root/bin/sett" import kine --endpoint "$endpoint" --data-dir "$run/sett.data" 2>&1 | tee "$run/import.log"
	grep -q '"msg":"imported"' "$run/import.log"
	expect "compacted revision" "$(grep -o '"compact_revision":[0-9]*' "$run/import.log")" "\"compact_revision\":$compacted"
}
check "sett import kine --endpoint (k3s's DSN)" t_import

step "sett on 127.0.0.1:$store_port"
start sett "$root/bin/sett" serve --data-dir "$run/sett.data" \
	--listen-client-urls "$store_url" --listen-metrics-urls "http://127.0.0.1:$metrics_port"
wait_for 30 sett curl -sf "$store_url/health"
start_apiserver kube-apiserver-on-sett --etcd-servers="$store_url" --watch-cache=false

t_lists() {
	objects >"$run/after.txt"
	diff "$run/before.txt" "$run/after.txt"
	expect "objects" "$(wc -l <"$run/after.txt")" "$(wc -l <"$run/before.txt")"
}
check "every object listed on sett with the resourceVersion it had on kine" t_lists

t_lease() {
	local lease
	lease=$(etcdctl get /registry/events/mv-a/moved.1 -w json | jq -r '.kvs[0].lease')
	echo "lease $lease"
	[ "$lease" != null ] && [ "$lease" -gt 0 ]
	etcdctl lease timetolive "$(printf '%x' "$lease")" | grep -q 'remaining'
}
check "the event's key keeps its lease" t_lease

has_after_move() { grep -q '"name":"after-move"' "$run/watch.json"; }
t_watch() {
	local rv1
	# A watch from before the move, opened on sett.
	# -N: curl buffers what it writes to a file; the events must land as they come.
	curl -skN -H "Authorization: Bearer $token" \
		"https://127.0.0.1:$api_port/api/v1/namespaces/mv-a/configmaps?watch=1&resourceVersion=$rv0" >"$run/watch.json" &
	local watcher=$!
	k create configmap after-move -n mv-a --from-literal=at=sett >/dev/null
	rv1=$(k get configmap after-move -n mv-a -o jsonpath='{.metadata.resourceVersion}')
	echo "resourceVersion before the move $rv0, last on kine $last_rv, first on sett $rv1"
	[ "$rv1" -gt "$last_rv" ]
	poll 30 has_after_move
	kill "$watcher" 2>/dev/null || true
	wait "$watcher" 2>/dev/null || true
	jq -r '[.type, .object.metadata.name, .object.metadata.resourceVersion // .object.code] | join(" ")' "$run/watch.json" >"$run/watch.txt"
	cat "$run/watch.txt"
	! grep -q '^ERROR' "$run/watch.txt"
	expect "events" "$(awk '{ print $1, $2 }' "$run/watch.txt" | tr '\n' ',')" \
		"ADDED before-move,MODIFIED cm-0,DELETED cm-1,ADDED after-move,"
}
check "a watch from resourceVersion $rv0 replays the writes since and goes on, no 410" t_watch

t_logs() {
	local bad
	bad=$(grep -hE '^E|"level":"(warn|error)"' "$run/kube-apiserver-on-sett.log" | grep -i etcd || true)
	bad+=$(grep -v '"level":"info"' "$run/sett.log" || true)
	if [ -n "$bad" ]; then
		echo "$bad"
		return 1
	fi
}
check "no etcd errors in kube-apiserver's log, no warnings in sett's" t_logs

step "scenario $((SECONDS - scenario_start))s, total $((SECONDS - started))s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
