package embed

import (
	"fmt"
	"slices"
	"strings"
)

// CheckV2Deprecation checks etcd's --v2-deprecation: etcd 3.7 accepts
// only the stages from write-only on (a list, each checked), and says so
// in its flag parser's words.
func CheckV2Deprecation(stages string) error {
	for _, v := range strings.Split(stages, ",") {
		if !slices.Contains([]string{"write-only", "write-only-skip-check", "write-only-drop-data", "gone"}, v) {
			return fmt.Errorf("invalid value %q for flag -v2-deprecation: invalid value %q", stages, v)
		}
	}
	return nil
}

// EtcdNotApplicable names etcd's settings, by their flags, that cannot
// matter to a single sett member: raft, peers and membership
// bootstrapping, the WAL and etcd's bbolt backend, checks between
// members. switches are the boolean ones, values the rest. sett's
// command accepts them, so etcd's command line (a kind static pod's,
// say) starts sett unchanged, and logs those given; a host program that
// turns an etcd configuration into a Config may do the same.
func EtcdNotApplicable() (switches, values []string) {
	switches = []string{
		"peer-client-cert-auth", "peer-auto-tls", "peer-skip-client-san-verification",
		"force-new-cluster", "enable-v2", "pre-vote", "initial-election-tick-advance",
		"experimental-initial-corrupt-check", "experimental-enable-lease-checkpoint",
		"experimental-stop-grpc-service-on-defrag", "client-cert-allowed-hostname-check",
		"discovery-insecure-transport", "discovery-insecure-skip-tls-verify",
	}
	values = []string{
		"initial-cluster-state", "listen-peer-urls", "peer-cert-file", "peer-key-file",
		"peer-trusted-ca-file", "peer-crl-file", "peer-cert-allowed-cn", "peer-cert-allowed-hostname",
		"peer-client-cert-file", "peer-client-key-file", "snapshot-count", "heartbeat-interval",
		"election-timeout", "max-snapshots", "max-wals", "wal-dir", "max-learners", "raft-read-timeout",
		"raft-write-timeout", "discovery", "discovery-srv", "discovery-srv-name", "discovery-fallback",
		"discovery-proxy", "discovery-token", "discovery-endpoints", "discovery-dial-timeout",
		"discovery-request-timeout", "discovery-keepalive-time", "discovery-keepalive-timeout",
		"discovery-cert", "discovery-key", "discovery-cacert", "discovery-user", "discovery-password",
		"feature-gates", "experimental-compact-hash-check-time", "experimental-corrupt-check-time",
		"experimental-snapshot-catchup-entries", "experimental-compaction-batch-limit",
		"experimental-max-learners", "backend-batch-interval", "backend-batch-limit",
		"backend-bbolt-freelist-type", "bootstrap-defrag-threshold-megabytes",
		"distributed-tracing-address", "distributed-tracing-service-name",
		"distributed-tracing-instance-id", "distributed-tracing-sampling-rate",
		"log-rotation-config-json", "v2-deprecation", "snapshot-catchup-entries",
		"compaction-batch-limit", "compaction-sleep-interval", "corrupt-check-time",
		"compact-hash-check-time", "downgrade-check-time", "watch-progress-notify-interval-deprecated",
		// etcd itself accepts and ignores these (etcdmain's ignored list).
		"cluster-active-size", "cluster-remove-delay", "cluster-sync-interval", "config", "force",
		"max-result-buffer", "max-retry-attempts", "peer-heartbeat-interval", "peer-election-timeout",
		"retry-interval", "snapshot", "v", "vv",
	}
	return switches, values
}
