#!/usr/bin/env bash
# Installed by run.sh as bin/etcd-e2e/SERVER/bin/etcd, in front of the
# server under test (etcd.real beside it: a real etcd, or sett). It starts
# the server unchanged (same pid, argv[0] still names etcd), except a
# member of a cluster of more than one: that needs peers, which sett does
# not have, so neither server starts it (nor the second member that
# names a discovery token already named: a cluster found by discovery). The refusal is recorded in
# peers.log beside this script (with the member's data dir, which holds the
# test's name), and run.sh's summary sets those tests apart; starting no
# peer also makes the multi-member tests fail at once instead of waiting.
members=1 datadir= token= prev=
for a in "$@"; do
	v=
	case $prev in
	--initial-cluster) v=$a ;;
	--data-dir) datadir=$a ;;
	--discovery-token) token=$a ;;
	esac
	case $a in
	--initial-cluster=*) v=${a#--initial-cluster=} ;;
	--data-dir=*) datadir=${a#--data-dir=} ;;
	--discovery-token=*) token=${a#--discovery-token=} ;;
	esac
	if [ -n "$v" ]; then
		IFS=, read -ra m <<<"$v"
		members=${#m[@]}
	fi
	prev=$a
done
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "$token" ]; then
	# A cluster's members have their data dirs side by side.
	key="$(dirname "$datadir") $token"
	if grep -qxF -- "$key" "$here/discovery.tokens" 2>/dev/null; then
		members=2
	fi
	printf '%s\n' "$key" >>"$here/discovery.tokens"
fi
if [ "$members" -gt 1 ]; then
	printf '%s\t%d\t%s\n' "$datadir" "$members" "$*" >>"$here/peers.log"
	echo "etcd-e2e: not started: a member of a cluster of more than one member needs peers" >&2
	exit 2
fi
exec -a "$0" "$here/etcd.real" "$@"
