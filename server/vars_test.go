package server

import (
	"slices"
	"testing"
)

func TestHideSecrets(t *testing.T) {
	args := []string{"sett", "serve", "--snapshot-s3-secret-key", "s3cr3t", "--etcd-s3-session-token=tok", "--name=s3cr3t-not", "tok"}
	want := []string{"sett", "serve", "--snapshot-s3-secret-key", "[hidden]", "--etcd-s3-session-token=[hidden]", "--name=s3cr3t-not", "[hidden]"}
	if got := hideSecrets(args, []string{"s3cr3t", "tok", ""}); !slices.Equal(got, want) {
		t.Errorf("hideSecrets = %q, want %q", got, want)
	}
	if args[3] != "s3cr3t" {
		t.Error("hideSecrets changed its argument")
	}
}
