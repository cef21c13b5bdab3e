#!/usr/bin/env bash
# Installed by run.sh as bin/etcd-e2e/SERVER/bin/etcd, in front of the
# server under test (etcd.real beside it: a real etcd, or sett). It starts
# the server unchanged (same pid, argv[0] still names etcd), except a
# member of a cluster of more than one: that needs peers, which sett does
# not have, so neither server starts it. The refusal is recorded in
# peers.log beside this script (with the member's data dir, which holds the
# test's name), and run.sh's summary sets those tests apart; starting no
# peer also makes the multi-member tests fail at once instead of waiting.
members=1 datadir= prev=
for a in "$@"; do
	case $prev in
	--initial-cluster) v=$a ;;
	--data-dir) datadir=$a; v= ;;
	*) v= ;;
	esac
	case $a in
	--initial-cluster=*) v=${a#--initial-cluster=} ;;
	--data-dir=*) datadir=${a#--data-dir=} ;;
	esac
	if [ -n "$v" ]; then
		IFS=, read -ra m <<<"$v"
		members=${#m[@]}
	fi
	prev=$a
done
here=$(cd "$(dirname "$0")" && pwd)
if [ "$members" -gt 1 ]; then
	printf '%s\t%d\t%s\n' "$datadir" "$members" "$*" >>"$here/peers.log"
	echo "etcd-e2e: not started: a member of a $members-member cluster needs peers" >&2
	exit 2
fi
exec -a "$0" "$here/etcd.real" "$@"
