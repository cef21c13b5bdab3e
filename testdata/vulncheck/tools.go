//go:build tools

// Package tools pins the commands `make vulncheck` builds.
package tools

import (
	_ "golang.org/x/vuln/cmd/govulncheck"
	_ "golang.org/x/vulndb/cmd/indexdb"
)
