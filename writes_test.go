package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fileWrites is every place sett's code makes a file, by file and
// function, with how what it writes survives a power cut, or why it
// needs not. A file that must survive is written beside its name,
// synced, renamed into place, and its directory synced; a scratch file
// is removed once used, and a power cut leaves only a stray temporary.
var fileWrites = map[string]string{
	"snapshot/file.go writeFileAtomic":          "snapshots: written to .part, synced, renamed, the directory synced",
	"snapshot/unfinished.go mark":               "a restore's mark, empty: synced, the directory synced",
	"transport/tls.go writeDurable":             "--auto-tls's key and certificate: written aside, synced, renamed, the directory synced",
	"snapshot/s3.go Download":                   "a download to scratch (a restore's snapshot or delta): synced and renamed whole, removed once restored",
	"snapshot/objects.go Open":                  "scratch: removed when closed",
	"snapshot/compress.go Decompressed":         "scratch: removed when the restore is done",
	"snapshot/restore.go restoreEtcd":           "scratch: bbolt's copy of an etcd snapshot, removed once restored",
	"server/maintenance.go etcdFile":            "scratch: unlinked once open",
	"backup/shipper.go uploadFull":              "scratch: a full snapshot on its way to the bucket, removed once uploaded",
	"embed/log.go logOutputs":                   "--log-outputs: a log, appended to",
	"engine/badger/lock.go lockDir":             "the lock file, empty: its lock, not its content, is what counts",
	"engine/badger/wal.go startSegment":         "the write-ahead log: its own records' checksums and syncs, the directory synced",
	"engine/badger/trim_linux.go clearAccessed": "/proc/self/clear_refs: no file, a request to the kernel",
	"engine/badger/clone_linux.go cloneFile":    "a fork's clone of its source's file, in a directory marked unfinished until the fork is synced whole (syncfs) and renamed into place",
	"engine/badger/fork.go copySparse":          "a fork's copy of its source's file, synced, in a directory marked unfinished until the fork is whole and renamed into place",
	"fork/fork.go identify":                     "a fork's new IDs: synced, the directory synced, in a directory marked unfinished until the fork is renamed into place",
}

// TestFileWrites: every place the code makes a file is in fileWrites,
// and every entry there is still in the code.
func TestFileWrites(t *testing.T) {
	found := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch path {
			case "bench", "tools", "testdata", "deploy", "internal/harness", "internal/forgetfs", "internal/casefile":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok && makesFile(call) {
					found[filepath.ToSlash(path)+" "+fn.Name.Name] = true
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range slices.Sorted(func(yield func(string) bool) {
		for w := range found {
			if !yield(w) {
				return
			}
		}
	}) {
		if _, ok := fileWrites[w]; !ok {
			t.Errorf("%s makes a file and is not in fileWrites: write it aside, sync it, rename it and sync its directory (or say why it needs not), and list it", w)
		}
	}
	for w := range fileWrites {
		if !found[w] {
			t.Errorf("fileWrites lists %s, which makes no file now", w)
		}
	}
}

// makesFile reports whether call is os.WriteFile, os.Create,
// os.CreateTemp, or os.OpenFile with O_CREATE.
func makesFile(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "os" {
		return false
	}
	switch sel.Sel.Name {
	case "WriteFile", "Create", "CreateTemp":
		return true
	case "OpenFile":
		created := false
		if len(call.Args) > 1 {
			ast.Inspect(call.Args[1], func(n ast.Node) bool {
				if s, ok := n.(*ast.SelectorExpr); ok && s.Sel.Name == "O_CREATE" {
					created = true
				}
				return true
			})
		}
		return created
	}
	return false
}
