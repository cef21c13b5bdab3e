//go:build tools

// Package k8s pins the Kubernetes binaries that testdata/e2e/run.sh builds.
// The build tag keeps this file out of every build; it exists so that
// `go mod tidy` keeps k8s.io/kubernetes and its dependencies in go.mod.
package k8s

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
