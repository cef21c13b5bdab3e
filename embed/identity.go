package embed

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/settdb/sett/fork"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
)

// singleIdentity is a single member's member and cluster IDs: those it
// keeps from its first start, or, on a new data dir, etcd's for the same
// name, initial cluster, peer URLs and cluster token, kept from then on,
// as etcd keeps its own. A fork's first start takes the IDs the fork was
// given (package fork), in the store dir storeDir. A data dir written
// before sett kept them goes on with the IDs derived from the name
// (cluster ID 0 says so to the server), which its member records are
// keyed by.
func (c Config) singleIdentity(ctx context.Context, store *mvcc.Store, storeDir string, log *slog.Logger) (member, cluster uint64, err error) {
	if member, cluster, ok, err := fork.TakeIDs(ctx, storeDir, store); ok || err != nil {
		if ok {
			log.Info("a fork's first start: took the member and cluster IDs it was given",
				"member_id", fmt.Sprintf("%x", member), "cluster_id", fmt.Sprintf("%x", cluster))
		}
		return member, cluster, err
	}
	id, err := store.Records(mvcc.IdentityTable)
	if err != nil {
		return 0, 0, err
	}
	if b, ok := id[""]; ok {
		return server.DecodeIdentity(b)
	}
	legacy := server.MemberID(c.Name)
	records, err := store.Records(mvcc.MemberTable)
	if err != nil {
		return 0, 0, err
	}
	if store.Rev() > 1 || len(records) > 0 {
		return legacy, 0, nil
	}
	b := server.Bootstrap{
		Name: c.Name, InitialCluster: c.InitialCluster,
		AdvertisePeerURLs: strings.Join(c.InitialAdvertisePeerURLs, ","), Token: c.InitialClusterToken,
	}
	if member, cluster, err = server.EtcdIDs(b); err != nil {
		log.Warn("member and cluster IDs derived from --name: etcd would not start with these flags", "error", err)
		return legacy, 0, nil
	}
	return member, cluster, store.WriteRecords(ctx, mvcc.IdentityTable, map[string][]byte{"": server.EncodeIdentity(member, cluster)})
}
