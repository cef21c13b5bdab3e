#!/usr/bin/env bash
# Runs a real Kubernetes control plane on sett and drives it with kubectl:
# kube-apiserver and kube-controller-manager (k8s.io/kubernetes, pinned in
# k8s/go.mod) store everything in a fresh sett, and the scenario below checks
# what a cluster user would see. There is no scheduler and no kubelet, so
# pods stay Pending; everything else a controller does happens for real.
#
# Everything listens on 127.0.0.1 only. Binaries and the run's files go to
# testdata/e2e/work/ (git-ignored); the run's folder is removed when every
# check passed and kept, with the logs, when one failed.
#
# Prints one `ok - NAME` or `not ok - NAME` line per check and ends with
# `N passed, M failed`; exits 1 when M > 0.
# Environment:
#   E2E_KEEP=1             keep the run's folder even when everything passed
#   E2E_COMPACTION=20s     the apiserver's --etcd-compaction-interval
#   E2E_TIMEOUT=600        seconds the scenario may take before it is stopped
#   E2E_APISERVER_FLAGS    extra kube-apiserver flags (e.g. --v=4)
#   E2E_ETCD=/path/to/etcd run the same scenario on a real etcd instead of
#                          sett, to tell sett's differences from the
#                          scenario's own
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
compaction=${E2E_COMPACTION:-20s}

. "$here/lib.sh"

build_binaries build etcdctl

# 2. The cluster.
run=$(mktemp -d "$work/run.XXXXXX")

read -r store_port api_port kcm_port peer_port metrics_port <<<"$(free_ports 5)"
# The store speaks mutual TLS, as kubeadm's etcd does: the CA, its serving
# certificate and the apiserver's client certificate come from the same
# script docs/DEPLOY.md uses, and the apiserver's --etcd-* flags below are
# the recipe's.
pki=$run/etcd-pki
"$root/deploy/pki/make-certs.sh" "$pki" >/dev/null
store_tls=(--cert-file="$pki/server.crt" --key-file="$pki/server.key"
	--client-cert-auth --trusted-ca-file="$pki/ca.crt")
store_url=https://127.0.0.1:$store_port
make_credentials

if [ -n "${E2E_ETCD:-}" ]; then
	store=etcd
	step "etcd ($E2E_ETCD) on 127.0.0.1:$store_port"
	start etcd "$E2E_ETCD" --name default --data-dir "$run/etcd.data" \
		--listen-client-urls "$store_url" --advertise-client-urls "$store_url" "${store_tls[@]}" \
		--listen-metrics-urls "http://127.0.0.1:$metrics_port" \
		--listen-peer-urls "http://127.0.0.1:$peer_port" \
		--initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
		--initial-cluster "default=http://127.0.0.1:$peer_port"
else
	store=sett
	step "sett on 127.0.0.1:$store_port"
	start sett "$root/bin/sett" serve --data-dir "$run/sett.data" \
		--listen-client-urls "$store_url" "${store_tls[@]}" \
		--listen-metrics-urls "http://127.0.0.1:$metrics_port"
fi
wait_for 30 "$store" curl -sf --cacert "$pki/ca.crt" --cert "$pki/client.crt" --key "$pki/client.key" "$store_url/health"

start_apiserver kube-apiserver \
	--etcd-servers="$store_url" \
	--etcd-cafile="$pki/ca.crt" \
	--etcd-certfile="$pki/client.crt" \
	--etcd-keyfile="$pki/client.key" \
	--etcd-compaction-interval="$compaction"

step "kube-controller-manager on 127.0.0.1:$kcm_port"
# No --authentication-kubeconfig: it would look for client CAs that this
# cluster has none of and log about it; its /healthz is open regardless.
start kube-controller-manager "$bin/kube-controller-manager" \
	--kubeconfig="$kubeconfig" \
	--bind-address=127.0.0.1 \
	--secure-port="$kcm_port" \
	--cert-dir="$run/kcm-pki" \
	--service-account-private-key-file="$run/sa.key" \
	--root-ca-file="$run/pki/apiserver.crt" \
	--use-service-account-credentials \
	--leader-elect=true \
	--controllers='*'
wait_for 60 kube-controller-manager curl -skf "https://127.0.0.1:$kcm_port/healthz"
step "cluster up after $((SECONDS - started))s"

# 3. The scenario.
begin_scenario

k() { "$bin/kubectl" --kubeconfig="$kubeconfig" --cache-dir="$run/kubectl-cache" --request-timeout=60s "$@"; }
etcdctl() {
	"$root/bin/etcdctl" --endpoints="$store_url" --cacert="$pki/ca.crt" --cert="$pki/client.crt" \
		--key="$pki/client.key" --command-timeout=30s "$@"
}


# The apiserver's resourceVersions are the store's revisions.
rv() { k get "$@" -o jsonpath='{.metadata.resourceVersion}'; }

compact_rev() {
	curl -sf "http://127.0.0.1:$metrics_port/metrics" |
		awk '$1 == "etcd_debugging_mvcc_compact_revision" { printf "%d\n", $2 }'
}

namespaces="e2e-a e2e-b e2e-c"

t_cluster() {
	k get --raw '/readyz?verbose' | grep -F '[+]etcd ok'
	expect "server version" "$(k version -o json | jq -r .serverVersion.gitVersion)" "$k8s_version"
}

has_leader() { [ -n "$(k get lease -n kube-system kube-controller-manager -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)" ]; }
t_leader() { poll 60 has_leader; }

has_default_sa() { k get serviceaccount default -n "$1" >/dev/null 2>&1; }
t_namespaces() {
	for ns in $namespaces; do k create namespace "$ns"; done
	# The serviceaccount controller fills each new namespace.
	for ns in $namespaces; do poll 60 has_default_sa "$ns"; done
}

# 100 configmaps (cm-N, about 1 KiB each, label batch=N%4) and 100 secrets.
objects_yaml() {
	local ns=$1 i pad
	pad=$(printf 'x%.0s' {1..1000})
	for i in $(seq 0 99); do
		cat <<EOF
apiVersion: v1
kind: ConfigMap
metadata: {name: cm-$i, namespace: $ns, labels: {batch: "$((i % 4))"}}
data: {index: "$i", filler: "$pad"}
---
apiVersion: v1
kind: Secret
metadata: {name: s-$i, namespace: $ns}
stringData: {password: "secret-$i"}
---
EOF
	done
}

t_bulk() {
	local ns=$1
	objects_yaml "$ns" >"$run/objects-$ns.yaml"
	k apply -f "$run/objects-$ns.yaml" >/dev/null
	expect configmaps "$(k get configmaps -n "$ns" -o name | count '^configmap/cm-')" 100
	expect secrets "$(k get secrets -n "$ns" -o name | count '^secret/s-')" 100
}

t_chunked() {
	local names total
	names=$(k get configmaps -n e2e-a --chunk-size=10 -o name -v=6 2>"$run/chunked.log")
	expect "configmaps listed" "$(echo "$names" | count '^configmap/cm-')" 100
	expect "distinct names" "$(echo "$names" | sort -u | count '^configmap/cm-')" 100
	# kubectl logs each request at -v=6; every page but the first has a token.
	total=$(echo "$names" | count .)
	expect "requests with a continue token" "$(grep '"Response"' "$run/chunked.log" | count 'continue=')" "$(((total + 9) / 10 - 1))"
	expect "all namespaces" "$(k get configmaps -A --chunk-size=25 -o name | count '^configmap/cm-')" 300
}

# Pages through the raw API, checking remainingItemCount on each page.
t_pages() {
	local total url page cont remaining seen=0 pages=0
	total=$(k get configmaps -n e2e-b -o name | count .)
	url='/api/v1/namespaces/e2e-b/configmaps?limit=7'
	cont=""
	while :; do
		page=$(k get --raw "$url${cont:+&continue=$cont}")
		pages=$((pages + 1))
		seen=$((seen + $(jq '.items | length' <<<"$page")))
		cont=$(jq -r '.metadata.continue // ""' <<<"$page")
		remaining=$(jq -r '.metadata.remainingItemCount // 0' <<<"$page")
		expect "remainingItemCount after $seen" "$remaining" "$((total - seen))"
		[ -n "$cont" ] || break
		[ "$pages" -lt 100 ]
	done
	expect "items over all pages" "$seen" "$total"
	expect pages "$pages" "$(((total + 6) / 7))"
}

t_selector() {
	expect "batch=1" "$(k get configmaps -n e2e-a -l batch=1 -o name | count .)" 25
	k delete configmaps -n e2e-b -l batch=0 >/dev/null
	expect "after deleting batch=0" "$(k get configmaps -n e2e-b -o name | count '^configmap/cm-')" 75
}

t_patch() {
	local r0 r1 r2 r3
	r0=$(rv configmap cm-0 -n e2e-a)
	k patch configmap cm-0 -n e2e-a --type=merge -p '{"data":{"index":"patched"}}' >/dev/null
	r1=$(rv configmap cm-0 -n e2e-a)
	expect data "$(k get configmap cm-0 -n e2e-a -o jsonpath='{.data.index}')" patched
	k label configmap cm-0 -n e2e-a e2e/labelled=yes >/dev/null
	r2=$(rv configmap cm-0 -n e2e-a)
	k annotate configmap cm-0 -n e2e-a e2e/note=hello >/dev/null
	r3=$(rv configmap cm-0 -n e2e-a)
	echo "resourceVersions $r0 $r1 $r2 $r3"
	[ "$r0" -lt "$r1" ]
	[ "$r1" -lt "$r2" ]
	[ "$r2" -lt "$r3" ]
	expect "by label" "$(k get configmaps -n e2e-a -l e2e/labelled=yes -o name)" configmap/cm-0
	expect annotation "$(k get configmap cm-0 -n e2e-a -o jsonpath='{.metadata.annotations.e2e/note}')" hello
	k patch secret s-0 -n e2e-a -p '{"stringData":{"password":"changed"}}' >/dev/null
	expect secret "$(k get secret s-0 -n e2e-a -o jsonpath='{.data.password}' | base64 -d)" changed
}

# An update carrying an old resourceVersion must lose, as etcd's compare on
# the mod revision makes it.
t_conflict() {
	local out
	k get configmap cm-1 -n e2e-a -o json >"$run/stale.json"
	k patch configmap cm-1 -n e2e-a --type=merge -p '{"data":{"index":"newer"}}' >/dev/null
	if out=$(k replace -f "$run/stale.json" 2>&1); then
		echo "stale replace succeeded: $out"
		return 1
	fi
	echo "$out" | grep -F 'the object has been modified'
	expect data "$(k get configmap cm-1 -n e2e-a -o jsonpath='{.data.index}')" newer
}

web_pods() { k get pods -n e2e-a -l app=web -o name | count .; }
web_rs_replicas() { k get replicasets -n e2e-a -l app=web -o jsonpath='{range .items[*]}{.status.replicas}{"\n"}{end}' | awk '{ n += $1 } END { print n + 0 }'; }
web_has() { [ "$(web_pods)" -eq "$1" ] && [ "$(web_rs_replicas)" -eq "$1" ]; }
web_rs_count() { [ "$(k get replicasets -n e2e-a -l app=web -o name | count .)" -eq "$1" ]; }

t_scale_up() {
	k create deployment web -n e2e-a --image=registry.k8s.io/pause:3.10 >/dev/null
	poll 60 web_has 1
	k scale deployment web -n e2e-a --replicas=5 >/dev/null
	poll 90 web_has 5
	expect "pod phases" "$(k get pods -n e2e-a -l app=web -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | sort -u)" Pending
}

t_scale_down() {
	k scale deployment web -n e2e-a --replicas=1 >/dev/null
	poll 90 web_has 1
}

t_rollout() {
	k set image deployment/web -n e2e-a pause=registry.k8s.io/pause:3.9 >/dev/null
	poll 60 web_rs_count 2
}

has_events() { [ "$(k get events -n e2e-a --field-selector "reason=$1" -o name | count .)" -gt 0 ]; }
t_events() {
	poll 30 has_events ScalingReplicaSet
	poll 30 has_events SuccessfulCreate
	poll 30 has_events SuccessfulDelete
	k get events -A | tee "$run/events.txt" | tail -5
	[ "$(count . <"$run/events.txt")" -gt 10 ]
}

crd_yaml() {
	cat <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.e2e.sett.dev}
spec:
  group: e2e.sett.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              colour: {type: string}
EOF
}

widgets_yaml() {
	local i
	for i in $(seq 0 29); do
		printf 'apiVersion: e2e.sett.dev/v1\nkind: Widget\nmetadata: {name: w-%d, namespace: e2e-a}\nspec: {size: %d, colour: blue}\n---\n' "$i" "$i"
	done
}

apply_widgets() { k apply -f "$run/widgets.yaml" >/dev/null; }
t_crd() {
	crd_yaml | k apply -f - >/dev/null
	k wait --for condition=established --timeout=60s crd/widgets.e2e.sett.dev >/dev/null
	widgets_yaml >"$run/widgets.yaml"
	# Discovery can trail the Established condition by a moment.
	poll 30 apply_widgets
	expect widgets "$(k get widgets -n e2e-a --chunk-size=7 -o name | count '^widget')" 30
	k patch widget w-3 -n e2e-a --type=merge -p '{"spec":{"colour":"red"}}' >/dev/null
	expect colour "$(k get widget w-3 -n e2e-a -o jsonpath='{.spec.colour}')" red
	expect "stored keys" "$(etcdctl get /registry/e2e.sett.dev/widgets/e2e-a/ --prefix --keys-only | count .)" 30
}

t_crd_delete() {
	k delete crd widgets.e2e.sett.dev --timeout=120s >/dev/null
	expect "stored keys" "$(etcdctl get /registry/e2e.sett.dev/ --prefix --keys-only | count .)" 0
}

ssa_yaml() { printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa, namespace: e2e-a}\ndata: {%s}\n' "$1"; }
managers() { k get configmap ssa -n e2e-a -o jsonpath='{range .metadata.managedFields[*]}{.manager}/{.operation}{"\n"}{end}' | sort | tr '\n' ' '; }

t_ssa() {
	local out r0 r1
	ssa_yaml 'a: "1"' | k apply --server-side -f - >/dev/null
	r0=$(rv configmap ssa -n e2e-a)
	ssa_yaml 'a: "2", b: "3"' | k apply --server-side -f - >/dev/null
	r1=$(rv configmap ssa -n e2e-a)
	[ "$r0" -lt "$r1" ]
	expect data "$(k get configmap ssa -n e2e-a -o jsonpath='{.data.a}{.data.b}')" 23
	expect managers "$(managers)" "kubectl/Apply "
	# The same apply again changes nothing, so nothing is written.
	ssa_yaml 'a: "2", b: "3"' | k apply --server-side -f - >/dev/null
	expect "no-op apply resourceVersion" "$(rv configmap ssa -n e2e-a)" "$r1"
	if out=$(ssa_yaml 'a: "9"' | k apply --server-side --field-manager=intruder -f - 2>&1); then
		echo "conflicting apply succeeded: $out"
		return 1
	fi
	echo "$out" | grep -i conflict
	ssa_yaml 'a: "9"' | k apply --server-side --field-manager=intruder --force-conflicts -f - >/dev/null
	expect "data after force" "$(k get configmap ssa -n e2e-a -o jsonpath='{.data.a}{.data.b}')" 93
	expect "managers after force" "$(managers)" "intruder/Apply kubectl/Apply "
}

# The watch prints a table row per event: EVENT NAME DATA AGE.
watch_lines() { [ "$(grep -cE "$1" "$run/watch.out" || true)" -ge "$2" ]; }
t_watch() {
	local existing pid i
	existing=$(k get configmaps -n e2e-b -o name | count .)
	# --watch lists first and then watches from that list's resourceVersion,
	# so once the list is printed no later change can be missed.
	timeout 120 "$bin/kubectl" --kubeconfig="$kubeconfig" --cache-dir="$run/kubectl-cache" \
		get configmaps -n e2e-b --watch --output-watch-events --no-headers >"$run/watch.out" 2>"$run/watch.err" &
	pid=$!
	poll 30 watch_lines . "$existing"
	for i in $(seq 0 19); do k create configmap "w-$i" -n e2e-b --from-literal=i="$i" >/dev/null; done
	for i in $(seq 0 9); do k label configmap "w-$i" -n e2e-b seen=yes >/dev/null; done
	k delete configmap -n e2e-b $(seq -f 'w-%g' 10 19) >/dev/null
	poll 30 watch_lines '^DELETED +w-' 10
	poll 30 watch_lines '^MODIFIED +w-' 10
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	awk '$2 ~ /^w-/ { print $1, $2 }' "$run/watch.out" >"$run/watch.events"
	expect added "$(count '^ADDED' <"$run/watch.events")" 20
	expect modified "$(count '^MODIFIED' <"$run/watch.events")" 10
	expect deleted "$(count '^DELETED' <"$run/watch.events")" 10
	# Events arrive in revision order: each w-N was added before it changed.
	for i in $(seq 0 19); do
		expect "events of w-$i" "$(awk -v n="w-$i" '$2 == n { print $1 }' "$run/watch.events" | tr '\n' ' ')" \
			"$([ "$i" -lt 10 ] && echo 'ADDED MODIFIED ' || echo 'ADDED DELETED ')"
	done
}

compacted_past() { local c; c=$(compact_rev); [ -n "$c" ] && [ "$c" -gt "$1" ]; }
t_compaction() {
	local c0=$1
	poll 120 compacted_past "$c0"
	echo "compact revision $(compact_rev) (was $c0)"
}

# A continue token names the revision its list was read at; once that is
# compacted, the apiserver must answer 410 Expired. Its watch cache can still
# serve the page from a snapshot until it polls the compaction (every 15s),
# so this polls too.
continue_expired() {
	local out
	if out=$(k get --raw "/api/v1/namespaces/e2e-a/configmaps?limit=5&continue=$1" 2>&1); then
		return 1
	fi
	echo "$out"
	echo "$out" | grep -qE 'Expired|too old'
}
t_expired_continue() {
	local page cont r
	page=$(k get --raw "/api/v1/namespaces/e2e-a/configmaps?limit=5")
	cont=$(jq -r .metadata.continue <<<"$page")
	r=$(jq -r .metadata.resourceVersion <<<"$page")
	# A write, so that there is a newer revision to compact to.
	k annotate configmap cm-5 -n e2e-a e2e/expire=1 >/dev/null
	poll 120 compacted_past "$r"
	poll 60 continue_expired "$cont"
}

ns_gone() { ! k get namespace "$1" >/dev/null 2>&1; }
t_ns_delete() {
	k delete namespace e2e-c --timeout=120s >/dev/null
	poll 30 ns_gone e2e-c
	expect "stored keys" "$(etcdctl get /registry/ --prefix --keys-only | count '/e2e-c/')" 0
}

t_compaction_again() {
	local c1=$1
	poll 120 compacted_past "$c1"
	echo "compact revision $(compact_rev) (was $c1)"
	# After all this the apiserver still lists and watches.
	k get configmaps -A -o name | count . >/dev/null
	timeout 10 "$bin/kubectl" --kubeconfig="$kubeconfig" get configmaps -n e2e-a --watch -o name >/dev/null 2>&1 || [ $? -eq 124 ]
}

# Errors the apiserver and controller-manager log about etcd, less the one
# that the expired continue token above provokes on purpose.
t_logs() {
	local bad
	bad=$(grep -hE '^E|"level":"(warn|error)"' "$run/kube-apiserver.log" "$run/kube-controller-manager.log" |
		grep -i etcd | grep -v 'required revision has been compacted' || true)
	if [ "$store" = sett ]; then
		bad+=$(grep -v '"level":"info"' "$run/sett.log" || true)
	fi
	if [ -n "$bad" ]; then
		echo "$bad"
		return 1
	fi
}

c_start=$(compact_rev)
check "apiserver ready on $store, version $k8s_version" t_cluster
check "controller-manager holds its leader lease" t_leader
check "3 namespaces with their default service account" t_namespaces
for ns in $namespaces; do
	check "apply 100 configmaps and 100 secrets in $ns" t_bulk "$ns"
done
check "chunked list (--chunk-size) returns every configmap" t_chunked
check "paged raw list with remainingItemCount" t_pages
check "label selector list and delete" t_selector
check "patch, label, annotate raise resourceVersion" t_patch
check "update with a stale resourceVersion conflicts" t_conflict
check "compaction by the apiserver (every $compaction)" t_compaction "$c_start"
c_mid=$(compact_rev)
check "deployment scaled to 5 pods" t_scale_up
check "deployment scaled down to 1 pod" t_scale_down
check "new image makes a second replicaset" t_rollout
check "controller events listed" t_events
check "CRD established, 30 custom resources" t_crd
check "server-side apply: ownership, no-op, conflict, force" t_ssa
check "watch sees adds, changes and deletes in order" t_watch
check "continue token from a compacted revision expires" t_expired_continue
check "CRD deletion removes its custom resources" t_crd_delete
check "namespace deletion empties the namespace" t_ns_delete
check "compaction again, apiserver still serving" t_compaction_again "$c_mid"
check "no etcd errors in the logs" t_logs

scenario_time=$((SECONDS - scenario_start))
step "build ${build_time}s, scenario ${scenario_time}s, total $((SECONDS - started))s"
# What the store cost over the whole run, read from /proc as the process
# benchmark reads it: peak RSS (VmHWM) and CPU (utime + stime).
store_pid=${pids[0]}
if [ -r "/proc/$store_pid/status" ]; then
	hwm=$(awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$store_pid/status")
	cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); split($0, f, " "); printf "%.2f", (f[12] + f[13]) / hz }' "/proc/$store_pid/stat")
	step "$store: peak RSS ${hwm} MiB, CPU ${cpu} s"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
