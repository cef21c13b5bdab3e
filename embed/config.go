package embed

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/backup"
	"github.com/settdb/sett/cluster"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/snapshot"
	"github.com/settdb/sett/transport"
	"github.com/settdb/sett/watch"
)

// Config is everything a sett server is started with. Each field names
// the command-line flag that sets it (etcd's where etcd has one) and its
// default, which NewConfig returns. A zero Config is not valid: start
// from NewConfig.
type Config struct {
	// Name is the member's name; the member and cluster IDs derive from
	// it (--name, "default").
	Name string
	// DataDir is where the store lives; it is created if missing
	// (--data-dir, "./sett.data").
	DataDir string
	// Engine is "badger", or "tikv" in a binary built with -tags tikv
	// (--engine, "badger").
	Engine string
	// TiKVPDEndpoints are the PD servers (host:port) with Engine "tikv",
	// or one mock://DIR for client-go's in-process mock cluster, for
	// trials and tests only (--tikv-pd-endpoints).
	TiKVPDEndpoints []string
	// ElectionLease is how long an elected leader of a clustered (TiKV)
	// member set holds leadership without renewing it (--election-lease,
	// 2s).
	ElectionLease time.Duration

	// InitialClusterToken, InitialAdvertisePeerURLs and InitialCluster
	// are what a new single member derives its member and cluster IDs
	// from, as etcd does (--initial-cluster-token, etcd-cluster;
	// --initial-advertise-peer-urls, http://localhost:2380;
	// --initial-cluster, the name at the peer URLs). With TiKV, members
	// with the same token report the same cluster ID.
	InitialClusterToken      string
	InitialAdvertisePeerURLs []string
	InitialCluster           string
	// StrictReconfigCheck refuses a membership change that would leave
	// fewer started members than a quorum (--strict-reconfig-check, true).
	StrictReconfigCheck bool

	// ListenClientURLs serve clients: http(s)://host:port or
	// unix(s):///path; a port of 0 is bound to a free one, which
	// Server.ClientURLs reports (--listen-client-urls,
	// http://127.0.0.1:2379).
	ListenClientURLs []string
	// AdvertiseClientURLs are reported to clients
	// (--advertise-client-urls; default: the listen URLs).
	AdvertiseClientURLs []string
	// ListenClientHTTPURLs serve HTTP only (the JSON gateway, health,
	// metrics); ListenClientURLs then serve gRPC only
	// (--listen-client-http-urls).
	ListenClientHTTPURLs []string
	// ListenMetricsURLs serve only /metrics and the health endpoints
	// (--listen-metrics-urls).
	ListenMetricsURLs []string
	// EnableGRPCGateway serves etcd's JSON gateway (/v3/...) on the
	// client URLs' HTTP (--enable-grpc-gateway, true).
	EnableGRPCGateway bool
	// SocketReusePort and SocketReuseAddress set SO_REUSEPORT and
	// SO_REUSEADDR on the listeners (--socket-reuse-port,
	// --socket-reuse-address, false).
	SocketReusePort, SocketReuseAddress bool
	// CORS lists the origins browsers may call the HTTP endpoints from,
	// "*" for any (--cors, *); HostWhitelist the Host headers plain-HTTP
	// requests may name, "*" for any (--host-whitelist, *).
	CORS, HostWhitelist []string
	// EnablePprof serves /debug/pprof on the HTTP endpoints
	// (--enable-pprof, false).
	EnablePprof bool
	// Metrics is how much /metrics says (--metrics, basic): "extensive"
	// adds each gRPC method's handling-time histogram
	// (grpc_server_handling_seconds), as etcd does; any other value is
	// basic, as in etcd.
	Metrics string

	// ClientTLS is the TLS sett serves clients with, and presents when it
	// forwards to a leader: --cert-file, --key-file, --trusted-ca-file,
	// --client-cert-auth, --client-crl-file, --client-cert-allowed-cn,
	// --client-cert-allowed-hostname, --client-cert-file,
	// --client-key-file, --cipher-suites, --tls-min-version (TLS 1.2) and
	// --tls-max-version (Go's highest).
	ClientTLS transport.TLSFiles
	// AutoTLS serves TLS with a self-signed certificate when no CertFile
	// is given (--auto-tls, false), valid for SelfSignedCertValidity
	// years (--self-signed-cert-validity, 1).
	AutoTLS                bool
	SelfSignedCertValidity int

	// AuthToken is the token type: "simple", or etcd's
	// "jwt,pub-key=PATH,priv-key=PATH,sign-method=...,ttl=..."
	// (--auth-token, simple). AuthTokenTTL is how long an unused simple
	// token stays valid (--auth-token-ttl, 300 seconds). BcryptCost is
	// the cost of stored passwords, 4 to MaxBcryptCost; below 4, 10
	// (--bcrypt-cost, 10).
	AuthToken    string
	AuthTokenTTL time.Duration
	BcryptCost   int

	// MaxRequestBytes bounds a write request (--max-request-bytes,
	// 1.5 MiB); MaxTxnOps the operations in a txn (--max-txn-ops, 128);
	// QuotaBackendBytes the database size before the NOSPACE alarm
	// (--quota-backend-bytes, 2 GiB).
	MaxRequestBytes   int
	MaxTxnOps         int
	QuotaBackendBytes int64
	// MaxConcurrentStreams bounds the gRPC streams of one client
	// connection (--max-concurrent-streams, 2^32-1).
	MaxConcurrentStreams uint32
	// GRPCKeepaliveMinTime is the least time a client should wait between
	// pings (--grpc-keepalive-min-time, 5s); GRPCKeepaliveInterval how
	// long a quiet connection waits before the server pings it
	// (--grpc-keepalive-interval, 2h); GRPCKeepaliveTimeout how long the
	// server waits for the answer (--grpc-keepalive-timeout, 20s).
	GRPCKeepaliveMinTime, GRPCKeepaliveInterval, GRPCKeepaliveTimeout time.Duration

	// AutoCompactionMode is "periodic" or "revision"
	// (--auto-compaction-mode, periodic); AutoCompactionRetention the
	// history kept, a duration (periodic; a bare number is hours) or a
	// count of revisions, "0" for none (--auto-compaction-retention, 0).
	AutoCompactionMode, AutoCompactionRetention string
	// WatchProgressNotifyInterval is how often quiet progress_notify
	// watchers hear the current revision
	// (--watch-progress-notify-interval, 10m).
	WatchProgressNotifyInterval time.Duration
	// WatchRingEvents and WatchRingBytes bound the recent events kept in
	// memory for watchers; older ones are read from disk
	// (--watch-ring-events, 100000; --watch-ring-bytes, 0: 8 MiB, or
	// 1/32 of MemoryLimit).
	WatchRingEvents, WatchRingBytes int
	// WarningUnaryRequestDuration: a slower unary request is logged as a
	// warning (--warning-unary-request-duration, 300ms).
	// WarningApplyDuration: a slower apply counts in
	// etcd_server_slow_apply_total (--warning-apply-duration, 100ms).
	WarningUnaryRequestDuration, WarningApplyDuration time.Duration

	// MemoryLimit is the memory to stay within, in bytes: Badger's
	// memtables, the watch ring and mapped files are sized from it; 0:
	// none (--memory-limit; the command defaults it to the cgroup's limit,
	// see CgroupMemoryLimit). The Go runtime's own soft limit is the host
	// program's to set (see SoftMemoryLimit).
	MemoryLimit int64
	// UnsafeNoFsync commits without syncing: an acknowledged write can be
	// lost in a crash (--unsafe-no-fsync, false; tests only).
	UnsafeNoFsync bool
	// WAL keeps sett's own write-ahead log in front of Badger, which
	// then commits without syncing: a batch of commits costs one append
	// and one fdatasync (--wal, true). A data dir written with it opens
	// without it: the log is replayed, then removed.
	WAL bool
	// Pipeline applies and commits the next batch of writes while the
	// last one is made durable, and answers each once it is (--pipeline,
	// false). It pays with WAL; Badger alone syncs as it commits. Off by
	// default: a batch is in Badger before its record is synced, and
	// after a power cut the log cannot then be replayed over what
	// Badger kept, so an acknowledged write can be lost (kill -9 loses
	// nothing; docs/ARCHITECTURE.md, The write path).
	Pipeline bool

	// Snapshots are taken on SnapshotScheduleCron (5 fields, or "@every
	// 6h"; empty: never) into SnapshotDir (default: DataDir +
	// "-snapshots"), named SnapshotName ("sett-snapshot") plus their time,
	// in SnapshotFormat ("sett", or "etcd"), zstd-compressed if
	// SnapshotCompress, SnapshotRetention of them kept (5; 0: all). The
	// flags are --snapshot-schedule-cron, --snapshot-dir, and so on.
	SnapshotScheduleCron string
	SnapshotDir          string
	SnapshotName         string
	SnapshotFormat       string
	SnapshotCompress     bool
	SnapshotRetention    int
	// SnapshotS3, when not nil, is the bucket every scheduled snapshot is
	// uploaded to as well (--snapshot-s3 and --snapshot-s3-*, k3s's
	// --etcd-s3-*), and the one the continuous backup ships to. It needs
	// SnapshotScheduleCron or BackupInterval (Validate refuses it with
	// neither).
	SnapshotS3 *snapshot.S3
	// BackupInterval, when not zero, ships every committed revision to
	// the SnapshotS3 bucket continuously, at most this long after its
	// commit (--backup-interval), under <folder>/sett-backup/ (package
	// backup); with TiKV, from whichever member leads. A full snapshot starts a new chain every
	// BackupFullInterval (--backup-full-interval, 1h), and the bucket
	// keeps BackupRetention of them (--backup-retention, 0: all).
	BackupInterval     time.Duration
	BackupFullInterval time.Duration
	BackupRetention    int
	// BackupRestoreEmpty (--backup-restore-empty) has a server whose data
	// dir is empty (a volume's lost+found aside), a node that lost its
	// disk, or holds a restore that did not finish, restore the newest point
	// of the continuous backup in SnapshotS3 before it serves, so that it
	// recovers by itself; a bucket that holds no backup yet starts an
	// empty store, and a chain with a revision missing is refused with
	// that revision named. A data dir that is not empty is served as it
	// is. Badger only: TiKV keeps no data in the data dir.
	BackupRestoreEmpty bool
	// ForkFrom is a stopped sett's data dir (a store prepared once, say,
	// by a test suite) that Start forks into DataDir before it serves it:
	// DataDir then starts as that store's copy, at its revision, with
	// member and cluster IDs of its own, and goes its own way; the source
	// is only read, and any number of servers may fork it at once (see
	// package fork). DataDir must be missing or empty: a server started
	// again on its fork is given a Config without ForkFrom. Go programs
	// only: the command's `sett fork` does the same.
	ForkFrom string

	// Secrets are values the server never shows, besides SnapshotS3's
	// secret key and session token: /debug/vars shows the command line
	// with each hidden. The sett command sets it to the values of its
	// flags marked secret.
	Secrets []string

	// Logger receives the server's log. Nil: one built from LogLevel
	// ("debug", "info", "warn" or "error"; --log-level, info), LogFormat
	// ("json", "text" or etcd's "console", or "auto": text on a terminal,
	// JSON otherwise; --log-format, auto) and LogOutputs ("default" or
	// "stderr", "stdout", or file paths; --log-outputs, default), as
	// NewLogger builds it.
	Logger                          *slog.Logger
	LogLevel, LogFormat, LogOutputs string
}

// NewConfig returns the defaults, those of sett's command line.
func NewConfig() Config {
	// What a server holds, etcd's defaults, server keeps.
	sd := server.DefaultConfig()
	return Config{
		Name:                        sd.Name,
		DataDir:                     "./sett.data",
		Engine:                      "badger",
		ElectionLease:               cluster.DefaultLease,
		StrictReconfigCheck:         true,
		ListenClientURLs:            []string{"http://127.0.0.1:2379"},
		InitialClusterToken:         sd.ClusterToken,
		InitialAdvertisePeerURLs:    sd.PeerURLs,
		EnableGRPCGateway:           true,
		CORS:                        []string{"*"},
		HostWhitelist:               []string{"*"},
		ClientTLS:                   transport.TLSFiles{MinVersion: tls.VersionTLS12},
		SelfSignedCertValidity:      1,
		AuthToken:                   "simple",
		AuthTokenTTL:                auth.DefaultTokenTTL,
		BcryptCost:                  10,
		MaxRequestBytes:             sd.MaxRequestBytes,
		MaxTxnOps:                   sd.MaxTxnOps,
		QuotaBackendBytes:           sd.QuotaBackendBytes,
		MaxConcurrentStreams:        sd.MaxConcurrentStreams,
		GRPCKeepaliveMinTime:        sd.GRPCKeepaliveMinTime,
		GRPCKeepaliveInterval:       sd.GRPCKeepaliveInterval,
		GRPCKeepaliveTimeout:        sd.GRPCKeepaliveTimeout,
		AutoCompactionMode:          "periodic",
		AutoCompactionRetention:     "0",
		WatchProgressNotifyInterval: sd.WatchProgressNotifyInterval,
		WatchRingEvents:             watch.DefaultRingEvents,
		WarningUnaryRequestDuration: sd.WarningUnaryRequestDuration,
		WarningApplyDuration:        sd.WarningApplyDuration,
		SnapshotName:                "sett-snapshot",
		SnapshotFormat:              "sett",
		SnapshotRetention:           5,
		BackupFullInterval:          backup.DefaultFullInterval,
		Metrics:                     "basic",
		LogLevel:                    "info",
		LogFormat:                   "auto",
		LogOutputs:                  "default",
		WAL:                         true,
	}
}

// MaxBcryptCost is the highest --bcrypt-cost accepted. etcd accepts up to
// bcrypt's 31, at which one password takes days of a core to hash and
// each login as long to check.
const MaxBcryptCost = 16

// secrets are the values of c that the server must never show.
func (c Config) secrets() []string {
	out := slices.Clone(c.Secrets)
	if c.SnapshotS3 != nil {
		out = append(out, c.SnapshotS3.SecretKey, c.SnapshotS3.SessionToken)
	}
	return out
}

// Validate refuses a configuration sett cannot honour, with the reason,
// before anything is opened. Start calls it.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("no data directory (--data-dir)")
	}
	switch c.Engine {
	case "badger":
	case "tikv":
		if c.UnsafeNoFsync {
			return errors.New("--unsafe-no-fsync is refused with --engine tikv: TiKV, not sett, decides when its writes are durable")
		}
	default:
		return fmt.Errorf("unknown --engine %q: badger or tikv", c.Engine)
	}
	if len(c.ListenClientURLs) == 0 {
		return errors.New("no client URL to listen on (--listen-client-urls)")
	}
	if err := c.ClientTLS.Validate(); err != nil {
		return err
	}
	if _, err := server.ParseCORS(strings.Join(c.CORS, ",")); err != nil {
		return err
	}
	if c.BcryptCost > MaxBcryptCost {
		return fmt.Errorf("--bcrypt-cost %d: at most %d (each step doubles the CPU of every password hashed and of every login, which anyone may attempt: 16 takes seconds of a core, 31 days)", c.BcryptCost, MaxBcryptCost)
	}
	if c.MaxConcurrentStreams == 0 {
		return fmt.Errorf("--max-concurrent-streams 0: want 1 to %d", uint64(1<<32-1))
	}
	if c.MemoryLimit < 0 {
		return fmt.Errorf("--memory-limit %d: want 0 (none) or more", c.MemoryLimit)
	}
	if c.Logger == nil {
		if err := checkLogFormat(c.LogFormat); err != nil {
			return err
		}
		var lv slog.Level
		if err := lv.UnmarshalText([]byte(c.LogLevel)); err != nil {
			return fmt.Errorf("--log-level %q: %w", c.LogLevel, err)
		}
	}
	if c.SnapshotS3 != nil && c.SnapshotScheduleCron == "" && c.BackupInterval == 0 {
		return errors.New("--snapshot-s3 uploads scheduled snapshots or a continuous backup, but --snapshot-schedule-cron is not set (nor --backup-interval)")
	}
	if c.BackupInterval < 0 || c.BackupFullInterval < 0 || c.BackupRetention < 0 {
		return errors.New("--backup-interval, --backup-full-interval and --backup-retention cannot be negative")
	}
	if c.BackupRestoreEmpty && (c.SnapshotS3 == nil || c.Engine != "badger") {
		return errors.New("--backup-restore-empty restores an empty Badger data dir from the --snapshot-s3 bucket: it needs --snapshot-s3, and --engine badger (TiKV keeps no data in the data dir)")
	}
	if c.ForkFrom != "" && (c.Engine != "badger" || c.BackupRestoreEmpty) {
		return errors.New("ForkFrom forks a Badger store into the data dir: it needs --engine badger, and cannot go with --backup-restore-empty")
	}
	if c.BackupInterval > 0 && c.SnapshotS3 == nil {
		return errors.New("--backup-interval ships to a bucket, but --snapshot-s3 is not set")
	}
	if c.SnapshotScheduleCron != "" && c.SnapshotFormat != "sett" && c.SnapshotFormat != "etcd" {
		return fmt.Errorf("--snapshot-format %q: want sett or etcd", c.SnapshotFormat)
	}
	return nil
}
