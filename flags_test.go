package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/settdb/sett/embed"
	"github.com/urfave/cli/v2"
	etcdembed "go.etcd.io/etcd/server/v3/embed"
)

// etcdMainFlags are the flags etcd's main package adds to embed.Config's
// and those it accepts and ignores, read from its source in the module
// cache (the package keeps them unexported), each with etcd's default.
func etcdMainFlags(t *testing.T) map[string]string {
	t.Helper()
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "go.etcd.io/etcd/server/v3").Output()
	if err != nil {
		t.Fatalf("go list etcd's server module: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "etcdmain", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	// The three flags of values etcd checks, whose defaults are set in
	// code the source does not show at the flag.
	defaults := map[string]string{"discovery-fallback": "exit", "initial-cluster-state": "new", "v2-deprecation": "write-only"}
	flags := map[string]string{}
	for _, m := range regexp.MustCompile(`fs\.\w+\([^\n]*?, "([a-z0-9-]+)",`).FindAllStringSubmatch(string(src), -1) {
		flags[m[1]] = defaults[m[1]]
	}
	ignored := regexp.MustCompile(`(?s)ignored = \[\]string\{(.*?)\}`).FindStringSubmatch(string(src))
	if ignored == nil {
		t.Fatal("etcdmain/config.go: no ignored flags found")
	}
	for _, m := range regexp.MustCompile(`"([a-z0-9-]+)"`).FindAllStringSubmatch(ignored[1], -1) {
		flags[m[1]] = ""
	}
	for _, n := range []string{"config-file", "version", "v2-deprecation", "cluster-active-size"} {
		if _, ok := flags[n]; !ok {
			t.Fatalf("etcdmain/config.go: flag %s not found; has the source changed shape?", n)
		}
	}
	return flags
}

// delegated are etcd flags given no value here: the client certificate
// a single member refuses, since it makes no connection to present it on.
var delegated = []string{"client-cert-file", "client-key-file"}

// checkOnly is sett's command line whose serve action only checks the
// flags, as runServe does before it opens anything.
func checkOnly() *cli.App {
	a := app()
	a.Action = func(c *cli.Context) error {
		if err := refusals(c); err != nil {
			return err
		}
		_, err := serverTLS(c)
		return err
	}
	return a
}

// TestEtcdFlagsAccepted: every flag etcd v3.7.3 accepts, each given at
// etcd's default value, starts sett: none is unknown, none refused.
func TestEtcdFlagsAccepted(t *testing.T) {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	etcdembed.NewConfig().AddFlags(fs)
	defaults := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { defaults[f.Name] = f.DefValue })
	for n, v := range etcdMainFlags(t) {
		defaults[n] = v
	}
	args := []string{"sett"}
	for n, v := range defaults {
		if slices.Contains(delegated, n) || n == "config-file" || n == "version" {
			continue
		}
		args = append(args, "--"+n+"="+v)
	}
	if err := checkOnly().Run(args); err != nil {
		t.Fatalf("etcd's flags at etcd's defaults: %v", err)
	}
}

// TestFlagsRefusedAtStart: a flag sett cannot honour at the value given
// stops it before it opens anything, with a message saying why.
func TestFlagsRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory-mlock"}, "--memory-mlock is refused: sett does not lock its memory"},
		{[]string{"--enable-log-rotation"}, "--enable-log-rotation is refused: sett does not rotate"},
		{[]string{"--enable-distributed-tracing"}, "--enable-distributed-tracing is refused: sett exports no OpenTelemetry traces"},
		{[]string{"--logger", "capnslog"}, `"capnslog" is not a logger etcd knows`},
		{[]string{"--log-outputs", "systemd/journal"}, "sett does not write to journald itself"},
		{[]string{"--tls-min-version", "TLS1.1"}, `unexpected TLS version "TLS1.1"`},
		{[]string{"--tls-min-version", "TLS1.3", "--cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}, "--cipher-suites cannot be set when only TLS1.3 is allowed"},
		{[]string{"--tls-min-version", "TLS1.3", "--tls-max-version", "TLS1.2"}, "is greater than --tls-max-version"},
		{[]string{"--cipher-suites", "TLS_NOT_A_SUITE"}, `unexpected TLS cipher suite "TLS_NOT_A_SUITE"`},
		{[]string{"--client-crl-file", "x.crl"}, "--client-crl-file needs --client-cert-auth"},
		{[]string{"--client-cert-allowed-cn", "a"}, "--client-cert-allowed-cn needs --client-cert-auth"},
		{[]string{"--client-cert-auth", "--client-cert-allowed-cn", "a", "--client-cert-allowed-hostname", "b"}, "mutually exclusive"},
		{[]string{"--cors", "not-an-origin"}, "--cors"},
		{[]string{"--max-concurrent-streams", "0"}, "--max-concurrent-streams 0"},
		{[]string{"--unsafe-no-fsync", "--engine", "tikv"}, "--unsafe-no-fsync is refused with --engine tikv"},
		// etcd's words, which its own e2e suite waits for.
		{[]string{"--v2-deprecation=not-yet"}, `invalid value "not-yet" for flag -v2-deprecation: invalid value "not-yet"`},
		{[]string{"--v2-deprecation=gone,not-yet"}, `invalid value "gone,not-yet" for flag -v2-deprecation: invalid value "not-yet"`},
	} {
		args := append([]string{"sett", "--data-dir", filepath.Join(dir, "never"), "--log-outputs", "/dev/null"}, c.args...)
		err := app().Run(args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "never")); err == nil {
		t.Error("a refused start created the data directory")
	}
}

// flagFields says where each of serve's flags goes: the embed.Config
// field it sets, with a value to set it to (and flags it needs beside
// it), or what else becomes of it. A flag missing here fails
// TestFlagsReachConfig.
var flagFields = map[string]struct {
	field string   // the embed.Config field; or "refused", "not applicable", "command"
	value string   // the value to set; "" toggles a bool
	with  []string // flags the value needs beside it
}{
	"config-file":                    {field: "command"},
	"name":                           {"Name", "m1", nil},
	"data-dir":                       {"DataDir", "/d", nil},
	"engine":                         {"Engine", "tikv", nil},
	"tikv-pd-endpoints":              {"TiKVPDEndpoints", "pd:2379", nil},
	"initial-cluster-token":          {"InitialClusterToken", "t", nil},
	"initial-advertise-peer-urls":    {"InitialAdvertisePeerURLs", "http://a:2380", nil},
	"initial-cluster":                {"InitialCluster", "m1=http://a:2380", nil},
	"election-lease":                 {"ElectionLease", "7s", nil},
	"listen-client-urls":             {"ListenClientURLs", "http://127.0.0.1:1", nil},
	"advertise-client-urls":          {"AdvertiseClientURLs", "http://a:1", nil},
	"listen-client-http-urls":        {"ListenClientHTTPURLs", "http://127.0.0.1:2", nil},
	"enable-grpc-gateway":            {"EnableGRPCGateway", "", nil},
	"listen-metrics-urls":            {"ListenMetricsURLs", "http://127.0.0.1:3", nil},
	"socket-reuse-port":              {"SocketReusePort", "", nil},
	"socket-reuse-address":           {"SocketReuseAddress", "", nil},
	"cert-file":                      {"ClientTLS", "c.pem", nil},
	"key-file":                       {"ClientTLS", "k.pem", nil},
	"client-cert-auth":               {"ClientTLS", "", nil},
	"trusted-ca-file":                {"ClientTLS", "ca.pem", nil},
	"client-cert-file":               {"ClientTLS", "cc.pem", nil},
	"client-key-file":                {"ClientTLS", "ck.pem", nil},
	"client-crl-file":                {"ClientTLS", "x.crl", []string{"--client-cert-auth"}},
	"client-cert-allowed-cn":         {"ClientTLS", "alice", []string{"--client-cert-auth"}},
	"client-cert-allowed-hostname":   {"ClientTLS", "a.example", []string{"--client-cert-auth"}},
	"cipher-suites":                  {"ClientTLS", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", nil},
	"tls-min-version":                {"ClientTLS", "TLS1.3", nil},
	"tls-max-version":                {"ClientTLS", "TLS1.3", nil},
	"self-signed-cert-validity":      {"SelfSignedCertValidity", "7", nil},
	"auth-token":                     {"AuthToken", "jwt,pub-key=p,priv-key=k,sign-method=RS256", nil},
	"auth-token-ttl":                 {"AuthTokenTTL", "7", nil},
	"bcrypt-cost":                    {"BcryptCost", "7", nil},
	"auto-tls":                       {"AutoTLS", "", nil},
	"max-request-bytes":              {"MaxRequestBytes", "7", nil},
	"max-txn-ops":                    {"MaxTxnOps", "7", nil},
	"quota-backend-bytes":            {"QuotaBackendBytes", "7", nil},
	"max-concurrent-streams":         {"MaxConcurrentStreams", "7", nil},
	"grpc-keepalive-min-time":        {"GRPCKeepaliveMinTime", "7s", nil},
	"grpc-keepalive-interval":        {"GRPCKeepaliveInterval", "7s", nil},
	"grpc-keepalive-timeout":         {"GRPCKeepaliveTimeout", "7s", nil},
	"cors":                           {"CORS", "http://a.example", nil},
	"host-whitelist":                 {"HostWhitelist", "a.example", nil},
	"auto-compaction-mode":           {"AutoCompactionMode", "revision", nil},
	"auto-compaction-retention":      {"AutoCompactionRetention", "7", nil},
	"watch-progress-notify-interval": {"WatchProgressNotifyInterval", "7s", nil},
	"warning-unary-request-duration": {"WarningUnaryRequestDuration", "7s", nil},
	"unsafe-no-fsync":                {"UnsafeNoFsync", "", nil},
	"wal":                            {"WAL", "", nil},
	"pipeline":                       {"Pipeline", "", nil},
	"memory-limit":                   {"MemoryLimit", "7MiB", nil},
	"watch-ring-events":              {"WatchRingEvents", "7", nil},
	"watch-ring-bytes":               {"WatchRingBytes", "7", nil},
	"warning-apply-duration":         {"WarningApplyDuration", "7s", nil},
	"strict-reconfig-check":          {"StrictReconfigCheck", "", nil},
	"enable-pprof":                   {"EnablePprof", "", nil},
	"metrics":                        {"Metrics", "extensive", nil},
	"logger":                         {field: "refused"},
	"log-outputs":                    {"LogOutputs", "stdout", nil},
	"log-level":                      {"LogLevel", "debug", nil},
	"log-format":                     {"LogFormat", "json", nil},
	"enable-log-rotation":            {field: "refused"},
	"enable-distributed-tracing":     {field: "refused"},
	"memory-mlock":                   {field: "refused"},
	"snapshot-schedule-cron":         {"SnapshotScheduleCron", "@every 1h", nil},
	"snapshot-dir":                   {"SnapshotDir", "/s", nil},
	"snapshot-retention":             {"SnapshotRetention", "7", nil},
	"snapshot-compress":              {"SnapshotCompress", "", nil},
	"snapshot-name":                  {"SnapshotName", "n", nil},
	"snapshot-format":                {"SnapshotFormat", "etcd", nil},
	"snapshot-s3":                    {"SnapshotS3", "", nil},
	"backup-interval":                {"BackupInterval", "1s", nil},
	"backup-full-interval":           {"BackupFullInterval", "2h", nil},
	"backup-retention":               {"BackupRetention", "3", nil},
	"backup-restore-empty":           {"BackupRestoreEmpty", "", []string{"--snapshot-s3", "--backup-interval=1s"}},
	"snapshot-s3-endpoint":           {"SnapshotS3", "s3.example", []string{"--snapshot-s3"}},
	"snapshot-s3-endpoint-ca":        {"SnapshotS3", "ca.pem", []string{"--snapshot-s3"}},
	"snapshot-s3-skip-ssl-verify":    {"SnapshotS3", "", []string{"--snapshot-s3"}},
	"snapshot-s3-access-key":         {"SnapshotS3", "a", []string{"--snapshot-s3"}},
	"snapshot-s3-secret-key":         {"SnapshotS3", "s", []string{"--snapshot-s3"}},
	"snapshot-s3-session-token":      {"SnapshotS3", "t", []string{"--snapshot-s3"}},
	"snapshot-s3-secret-key-file":    {"SnapshotS3", "go.mod", []string{"--snapshot-s3"}},
	"snapshot-s3-session-token-file": {"SnapshotS3", "go.sum", []string{"--snapshot-s3"}},
	"snapshot-s3-bucket":             {"SnapshotS3", "b", []string{"--snapshot-s3"}},
	"snapshot-s3-region":             {"SnapshotS3", "eu-west-1", []string{"--snapshot-s3"}},
	"snapshot-s3-folder":             {"SnapshotS3", "f", []string{"--snapshot-s3"}},
	"snapshot-s3-insecure":           {"SnapshotS3", "", []string{"--snapshot-s3"}},
	"snapshot-s3-bucket-lookup-type": {"SnapshotS3", "path", []string{"--snapshot-s3"}},
	"snapshot-s3-timeout":            {"SnapshotS3", "7s", []string{"--snapshot-s3"}},
	"snapshot-s3-retention":          {"SnapshotS3", "7", []string{"--snapshot-s3"}},
}

// configOf is the embed.Config sett's command line makes of args.
func configOf(t *testing.T, args ...string) embed.Config {
	t.Helper()
	cfg := embed.NewConfig()
	a := &cli.App{Name: "sett", Flags: serveFlags(&cfg), Action: func(c *cli.Context) error { return serveConfig(c, &cfg) }}
	if err := a.Run(append([]string{"sett"}, args...)); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return cfg
}

// TestFlagsReachConfig: every flag of serve sets the embed.Config field
// flagFields names (and no flag is missing from it), is refused when set,
// is logged as not applicable, or is the command's own. The flags' defaults
// are NewConfig's.
func TestFlagsReachConfig(t *testing.T) {
	base := configOf(t)
	// The memory limit defaults to the cgroup's, which NewConfig cannot
	// know.
	base.MemoryLimit = 0
	if want := embed.NewConfig(); !reflect.DeepEqual(base, want) {
		t.Errorf("the flags' defaults:\n%+v\nNewConfig:\n%+v", base, want)
	}
	switches, values := embed.EtcdNotApplicable()
	notApplicable := append(slices.Clone(switches), values...)
	defaults := embed.NewConfig()
	// The config before a flag is set depends only on the flags its
	// value needs beside it, of which there are three sets: each is
	// parsed once. A parse costs a tenth of a second under the race
	// detector (cli's lookups match every flag's names with a regexp),
	// and the test parses for every flag.
	withOnly := map[string]embed.Config{}
	for _, f := range serveFlagsNoEnv(&defaults) {
		name := f.Names()[0]
		if slices.Contains(notApplicable, name) {
			continue
		}
		ff, ok := flagFields[name]
		if !ok {
			t.Errorf("--%s: not in flagFields; which embed.Config field does it set?", name)
			continue
		}
		switch ff.field {
		case "command":
			continue
		case "refused":
			arg := "--" + name
			if _, isBool := f.(*cli.BoolFlag); !isBool {
				arg += "=x"
			}
			if err := checkOnly().Run([]string{"sett", arg}); err == nil || !strings.Contains(err.Error(), "--"+name+" is refused: ") && !strings.Contains(err.Error(), "is not a logger") {
				t.Errorf("%s: %v, want it refused with the reason", arg, err)
			}
			continue
		}
		arg := "--" + name + "=" + ff.value
		if ff.value == "" {
			arg = fmt.Sprintf("--%s=%t", name, !f.(*cli.BoolFlag).Value)
		}
		key := strings.Join(ff.with, " ")
		if _, ok := withOnly[key]; !ok {
			withOnly[key] = configOf(t, ff.with...)
		}
		before := reflect.ValueOf(withOnly[key]).FieldByName(ff.field)
		if !before.IsValid() {
			t.Errorf("--%s: embed.Config has no field %s", name, ff.field)
			continue
		}
		after := reflect.ValueOf(configOf(t, append(slices.Clone(ff.with), arg)...)).FieldByName(ff.field)
		if reflect.DeepEqual(before.Interface(), after.Interface()) {
			t.Errorf("%s: embed.Config.%s stays %+v", arg, ff.field, before.Interface())
		}
	}
	// Every not-applicable flag given is named in the start-up log line.
	for _, name := range notApplicable {
		a := app()
		var logged []string
		a.Action = func(c *cli.Context) error { logged = notApplicableSet(c); return nil }
		arg := "--" + name
		if !slices.Contains(switches, name) {
			arg += "=1"
		}
		if err := a.Run([]string{"sett", arg}); err != nil {
			t.Errorf("%s: %v", arg, err)
		} else if !slices.Equal(logged, []string{name}) {
			t.Errorf("%s: logged as not applicable: %q", arg, logged)
		}
	}
}

// secretName: a flag whose name says it holds a key, secret, password or
// token, not a file's path (-file) or a duration (-ttl); and --user,
// which holds name:password.
var secretName = regexp.MustCompile(`^user$|(^|-)(key|secret|password|token)(-[a-z-]+)?$`)

// TestSecretFlags: every flag of every command whose name says it holds
// a secret is marked secret where it is declared, so that sett serve
// never shows it; and a marked flag's value reaches the server's secrets.
func TestSecretFlags(t *testing.T) {
	var walk func(path string, flags []cli.Flag, cmds []*cli.Command)
	walk = func(path string, flags []cli.Flag, cmds []*cli.Command) {
		for _, f := range flags {
			name := f.Names()[0]
			if strings.HasSuffix(name, "-file") || strings.HasSuffix(name, "-ttl") || !secretName.MatchString(name) {
				continue
			}
			if _, ok := f.(*secretString); !ok {
				t.Errorf("%s --%s: its name says it holds a secret, and it is not marked secret", path, name)
			}
		}
		for _, c := range cmds {
			walk(path+" "+c.Name, c.Flags, c.Subcommands)
		}
	}
	a := app()
	walk("sett", a.Flags, a.Commands)

	var cfg embed.Config
	err := (&cli.App{Flags: serveFlagsNoEnv(&cfg), Action: func(c *cli.Context) error {
		cfg.Secrets = secretValues(c)
		return nil
	}}).Run([]string{"sett", "--discovery-password=hunter2", "--initial-cluster-token=tok", "--name=n"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Secrets, []string{"tok", "hunter2"}) && !slices.Equal(cfg.Secrets, []string{"hunter2", "tok"}) {
		t.Errorf("the secrets of --discovery-password=hunter2 --initial-cluster-token=tok --name=n: %q, want hunter2 and tok", cfg.Secrets)
	}
}
