package main

import (
	"context"
	"crypto/tls"
	"strings"
	"time"

	"github.com/settdb/sett/internal/cmdline"
	"github.com/urfave/cli/v2"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The admin commands that talk to a running server (snapshot save,
// defrag) take etcdctl's client flags, under etcdctl's names and
// environment variables, so an operator's habits carry over.

// clientFlags returns the client flags; endpoints is the default of
// --endpoints (empty: none) and what it says about them.
func clientFlags(endpoints, usage string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "endpoints", Value: endpoints, Usage: usage, EnvVars: []string{"ETCDCTL_ENDPOINTS"}},
		&cli.DurationFlag{Name: "dial-timeout", Value: 2 * time.Second, Usage: "dial timeout", EnvVars: []string{"ETCDCTL_DIAL_TIMEOUT"}},
		&cli.DurationFlag{Name: "command-timeout", Usage: "give up after this long (0: never)", EnvVars: []string{"ETCDCTL_COMMAND_TIMEOUT"}},
		&cli.StringFlag{Name: "cacert", Usage: "verify the server with this CA bundle", EnvVars: []string{"ETCDCTL_CACERT"}},
		&cli.StringFlag{Name: "cert", Usage: "client certificate for TLS", EnvVars: []string{"ETCDCTL_CERT"}},
		secret(&cli.StringFlag{Name: "key", Usage: "client key for TLS", EnvVars: []string{"ETCDCTL_KEY"}}),
	}
}

// clientConfig is the client configuration the client flags describe.
func clientConfig(c *cli.Context) (clientv3.Config, error) {
	cfg := clientv3.Config{
		Endpoints:   cmdline.SplitList(c.String("endpoints")),
		DialTimeout: c.Duration("dial-timeout"),
	}
	var err error
	cfg.TLS, err = clientTLS(cfg.Endpoints, c.String("cacert"), c.String("cert"), c.String("key"))
	return cfg, err
}

// commandContext is the command's context, ended after --command-timeout
// if it is set.
func commandContext(c *cli.Context) (context.Context, context.CancelFunc) {
	if d := c.Duration("command-timeout"); d > 0 {
		return context.WithTimeout(c.Context, d)
	}
	return context.WithCancel(c.Context)
}

// clientTLS builds the client's TLS configuration from etcdctl's flags,
// with etcd's own code, as etcdctl does; nil means plain connections.
func clientTLS(endpoints []string, cacert, cert, key string) (*tls.Config, error) {
	secure := cacert != "" || cert != ""
	for _, e := range endpoints {
		secure = secure || strings.HasPrefix(e, "https://") || strings.HasPrefix(e, "unixs://")
	}
	if !secure {
		return nil, nil
	}
	return transport.TLSInfo{TrustedCAFile: cacert, CertFile: cert, KeyFile: key}.ClientConfig()
}
