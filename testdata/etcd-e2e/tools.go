//go:build tools

// Package etcde2e pins etcdctl, etcdutl and what etcd's e2e and common
// suites import (their test files are not part of a module build, so go
// mod tidy would not see them otherwise); see go.mod.
package etcde2e

import (
	_ "github.com/coreos/go-semver/semver"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	_ "github.com/prometheus/common/expfmt"
	_ "github.com/prometheus/common/model"
	_ "github.com/stretchr/testify/assert"
	_ "github.com/stretchr/testify/require"
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/tests/v3/framework"
	_ "go.etcd.io/etcd/tests/v3/framework/config"
	_ "go.etcd.io/etcd/tests/v3/framework/e2e"
	_ "go.etcd.io/etcd/tests/v3/framework/integration"
	_ "go.etcd.io/etcd/tests/v3/framework/interfaces"
	_ "go.etcd.io/etcd/tests/v3/framework/testutils"
	_ "go.etcd.io/etcd/tests/v3/robustness/failpoint"
	_ "golang.org/x/sync/errgroup"
)
