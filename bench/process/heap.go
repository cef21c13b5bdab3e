package process

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/google/pprof/profile"
)

// An Owner is a part of a server that holds Go heap: the heap a sample
// of a heap profile holds is the first Owner's, in the order of
// HeapOwners, one of whose patterns a frame of its stack names.
type Owner struct {
	Name     string
	Patterns []string // substrings of a function's full name
}

// HeapOwners are the owners a heap profile of sett or etcd is split by,
// the engines' parts before the code that calls them.
var HeapOwners = []Owner{
	{"memtables", []string{"badger/v4/skl.", "badger/v4.(*DB).newMemTable", "badger/v4.(*memTable)"}},
	{"table builders", []string{"badger/v4/table.NewTableBuilder", "badger/v4/table.(*Builder)", "badger/v4.(*levelsController).subcompact"}},
	{"iterators", []string{"badger/v4.(*Iterator)", "badger/v4/table.(*Iterator)", "badger/v4.(*Txn).NewIterator"}},
	{"badger, other", []string{"dgraph-io/badger", "dgraph-io/ristretto"}},
	{"bbolt", []string{"go.etcd.io/bbolt"}},
	{"raft", []string{"go.etcd.io/raft", "etcdserver/api/rafthttp", "storage/wal"}},
	{"watch", []string{"settdb/sett/watch", "server/v3/storage/mvcc.(*watchableStore)", "server/v3/storage/mvcc.(*watcher", "server/v3/storage/mvcc.newWatch"}},
	{"store index and caches", []string{"settdb/sett/mvcc", "server/v3/storage/mvcc", "google/btree"}},
	{"gRPC", []string{"google.golang.org/grpc", "golang.org/x/net/http2", "google.golang.org/protobuf"}},
}

// HeapByOwner reads the heap profile a server serves at url
// (/debug/pprof/heap, which sett and etcd serve with --enable-pprof)
// and returns the bytes in use, as of the last collection, that each
// of HeapOwners holds, and under "other" the rest.
func HeapByOwner(url string) (map[string]int64, error) {
	resp, err := http.Get(url + "/debug/pprof/heap")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("heap profile: %s", resp.Status)
	}
	p, err := profile.Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("heap profile: %w", err)
	}
	inuse := -1
	for i, st := range p.SampleType {
		if st.Type == "inuse_space" {
			inuse = i
		}
	}
	if inuse < 0 {
		return nil, fmt.Errorf("heap profile: no inuse_space")
	}
	owners := make(map[string]int64)
	for _, s := range p.Sample {
		owners[owner(s)] += s.Value[inuse]
	}
	return owners, nil
}

// owner names the owner of a sample's heap.
func owner(s *profile.Sample) string {
	for _, o := range HeapOwners {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				for _, p := range o.Patterns {
					if strings.Contains(line.Function.Name, p) {
						return o.Name
					}
				}
			}
		}
	}
	return "other"
}
