// Command kine is kine v0.17.5's binary, built from its own app package;
// see go.mod for why it lives here.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/k3s-io/kine/pkg/app"
)

func main() {
	if err := app.New().Run(os.Args); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "kine:", err)
		os.Exit(1)
	}
}
