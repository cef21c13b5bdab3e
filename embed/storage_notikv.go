//go:build !tikv

package embed

import (
	"errors"
	"log/slog"
)

// openTiKV refuses: the TiKV client (client-go and its dependencies) is
// only compiled in with the build tag, so the default binary stays small.
func openTiKV(string, *slog.Logger) (*storage, error) {
	return nil, errors.New("sett was built without TiKV support; rebuild with -tags tikv")
}
