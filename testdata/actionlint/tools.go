//go:build tools

// Package tools pins the command `make actionlint` builds.
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
