//go:build !linux

package server_test

import "errors"

func mountTmpfs(string, string) (func(), error) {
	return nil, errors.New("tmpfs is Linux's")
}
