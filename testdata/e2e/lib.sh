# Shared by the e2e scenarios (run.sh, kine.sh): helpers to build the
# Kubernetes binaries, start and stop processes, wait for them, and count
# checks. Sourced after the script has set here, root and GO; the
# caller sets run (its folder) before starting anything.
# shellcheck shell=bash

work=$here/work
bin=$work/bin
started=$SECONDS

step() { printf '== %s\n' "$*" >&2; }

for tool in openssl curl jq; do
	command -v "$tool" >/dev/null || { echo "$(basename "$0") needs $tool" >&2; exit 2; }
done

# build_binaries TARGET...: kube-apiserver, kube-controller-manager and
# kubectl, then the given targets of sett's Makefile.
# go build is incremental, so an up-to-date build costs only the linker's
# check; a cold one takes several minutes, hence nice.
build_binaries() {
	mkdir -p "$bin"
	k8s_version=$(cd "$here/k8s" && GOWORK=off "$GO" list -m -f '{{.Version}}' k8s.io/kubernetes)
	minor=${k8s_version#v1.}
	minor=${minor%%.*}
	# Without these the binaries call themselves v0.0.0-master, which kubectl
	# and the version-skew checks treat as a different release.
	ldflags=""
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	step "building kube-apiserver, kube-controller-manager, kubectl $k8s_version"
	t0=$SECONDS
	(cd "$here/k8s" && GOWORK=off nice -n 19 "$GO" build -ldflags "$ldflags" -o "$bin/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kubectl)
	step "building $*"
	make -s -C "$root" "$@" GO="$GO"
	build_time=$((SECONDS - t0))
	step "build: ${build_time}s"
}

pids=()
names=()
# An exited child stays a zombie until waited for, and kill -0 still
# reaches a zombie.
alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ $st != Z* ]]
}
cleanup() {
	local rc=$? i n
	# Controllers first, storage last, so nobody logs a lost etcd on the way out.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		[ -n "${pids[i]}" ] || continue
		kill "${pids[i]}" 2>/dev/null || continue
		for ((n = 0; n < 40; n++)); do
			alive "${pids[i]}" || break
			sleep 0.5
		done
		if alive "${pids[i]}"; then
			echo "${names[i]} still running 20s after SIGTERM: killed" >&2
			kill -9 "${pids[i]}" 2>/dev/null || true
		fi
		wait "${pids[i]}" 2>/dev/null || true
	done
	[ -n "${run:-}" ] || return 0
	if [ "$rc" -eq 0 ] && [ -z "${E2E_KEEP:-}" ]; then
		rm -rf "$run"
	else
		echo "logs and data kept in $run" >&2
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# make_credentials: the apiserver's admin token, its service-account key
# and a kubeconfig for kubectl; api_port must be set.
make_credentials() {
	token=$(openssl rand -hex 24)
	openssl genrsa -out "$run/sa.key" 2048 2>/dev/null
	openssl rsa -in "$run/sa.key" -pubout -out "$run/sa.pub" 2>/dev/null
	echo "$token,admin,admin,system:masters" >"$run/tokens.csv"
	kubeconfig=$run/kubeconfig
	cat >"$kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:$api_port
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: $token
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
EOF
}

# start_apiserver NAME STORAGE-FLAG...: kube-apiserver on api_port, on the
# store the flags name, started as NAME; returns once it is ready.
start_apiserver() {
	local name=$1
	shift
	step "$name on 127.0.0.1:$api_port"
	# --endpoint-reconciler-type=none: the "kubernetes" Service's endpoints would
	# carry the advertise address, and validation refuses a loopback one.
	# --service-cluster-ip-range is only where ClusterIPs are allocated from:
	# with no kube-proxy and no pods running, nothing is ever sent there.
	# shellcheck disable=SC2086
	start "$name" "$bin/kube-apiserver" "$@" \
		--bind-address=127.0.0.1 \
		--advertise-address=127.0.0.1 \
		--secure-port="$api_port" \
		--cert-dir="$run/pki" \
		--service-cluster-ip-range=10.96.0.0/16 \
		--endpoint-reconciler-type=none \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$run/sa.pub" \
		--service-account-signing-key-file="$run/sa.key" \
		--authorization-mode=RBAC \
		--token-auth-file="$run/tokens.csv" \
		--profiling=false \
		${E2E_APISERVER_FLAGS:-}
	wait_for 120 "$name" \
		curl -skf -H "Authorization: Bearer $token" "https://127.0.0.1:$api_port/readyz"
}

# stop NAME: stops the process started as NAME (SIGTERM, then SIGKILL
# after 20s) and waits for it.
stop() {
	local i n
	for ((i = 0; i < ${#pids[@]}; i++)); do
		[ "${names[i]}" = "$1" ] && [ -n "${pids[i]}" ] || continue
		kill "${pids[i]}" 2>/dev/null || true
		for ((n = 0; n < 40; n++)); do
			alive "${pids[i]}" || break
			sleep 0.5
		done
		kill -9 "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
		pids[i]=""
	done
}

# free_ports N: prints N distinct loopback ports that nothing listens on.
free_ports() {
	local p ports=" "
	while [ "$(wc -w <<<"$ports")" -lt "$1" ]; do
		p=$((20000 + RANDOM % 20000))
		case $ports in *" $p "*) continue ;; esac
		# A refused connection means nothing listens there.
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			ports+="$p "
		fi
	done
	echo "$ports"
}

# start NAME CMD...: runs CMD in the background, logging to NAME.log.
start() {
	local name=$1
	shift
	"$@" >"$run/$name.log" 2>&1 &
	pids+=($!)
	names+=("$name")
}

# wait_for SECONDS NAME CMD...: polls CMD until it succeeds, giving up early
# when the process started as NAME has died.
wait_for() {
	local limit=$1 deadline=$((SECONDS + $1)) what=$2 pid=${pids[-1]}
	shift 2
	until "$@" >/dev/null 2>&1; do
		if ! alive "$pid"; then
			echo "$what exited; last log lines:" >&2
			tail -30 "$run/$what.log" >&2
			exit 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "$what not ready after ${limit}s; last log lines:" >&2
			tail -30 "$run/$what.log" >&2
			exit 1
		fi
		sleep 0.5
	done
}

# begin_scenario: starts counting checks and the watchdog.
begin_scenario() {
	scenario_start=$SECONDS
	passed=0
	failed=0

	# Every wait below is bounded, but a kubectl stuck on a server that stopped
	# answering could still add up; this ends the run for good. tail returns as
	# soon as this script exits, so the watchdog never outlives it.
	limit=${E2E_TIMEOUT:-600}
	{
		timeout "$limit" tail --pid=$$ -f /dev/null >/dev/null 2>&1 ||
			kill -USR1 $$ 2>/dev/null
	} &
	trap 'echo "not ok - scenario finished within ${limit}s"; echo "$passed passed, $((failed + 1)) failed"; exit 1' USR1
}

# check NAME FUNC ARGS...: runs FUNC in a subshell with errexit on, so any
# failing command fails the check; the output is shown only on failure.
# (errexit is off inside `if`, `||` and `&&`, hence the explicit set +e.)
check() {
	local name=$1 rc
	shift
	set +e
	(set -e; "$@") >"$run/check.out" 2>&1
	rc=$?
	set -e
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
		echo "ok - $name"
	else
		failed=$((failed + 1))
		echo "not ok - $name"
		tail -25 "$run/check.out" | sed 's/^/#   /'
	fi
}

# poll SECONDS CMD...: retries CMD every half second until it succeeds.
poll() {
	local limit=$1 deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "timed out after ${limit}s waiting for: $*"
			return 1
		fi
		sleep 0.5
	done
}

# expect WHAT GOT WANT
expect() {
	if [ "$2" != "$3" ]; then
		echo "$1: got '$2', want '$3'"
		return 1
	fi
}

count() { grep -c "$1" || true; }
