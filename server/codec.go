package server

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codec is gRPC's proto codec with the buffers for outgoing messages taken
// from a pool with a size for every power of two up to 4 MiB.
//
// gRPC's own pool has sizes of 256 bytes, 4, 16 and 32 KiB and 1 MiB, so a
// 40 KiB response occupies a 1 MiB buffer for as long as it is queued. A
// watch stream whose client stopped reading keeps its queued responses,
// and a Kubernetes object of tens or hundreds of KiB is one revision that
// is never split: with gRPC's sizes each such stalled stream would hold
// megabytes, with these at most twice what it queued.
type codec struct {
	encoding.CodecV2
	pool mem.BufferPool
}

func newCodec() *codec {
	exps := make([]uint8, 0, 15)
	for e := uint8(8); e <= 22; e++ {
		exps = append(exps, e)
	}
	pool, err := mem.NewBinaryTieredBufferPool(exps...)
	if err != nil {
		// Only exponents of 64 or more are refused.
		panic(fmt.Sprintf("codec buffer pool: %v", err))
	}
	return &codec{CodecV2: encoding.GetCodecV2(grpcproto.Name), pool: pool}
}

// Marshal encodes a message as gRPC's codec does, into a pooled buffer of
// the smallest size that holds it.
func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		return c.CodecV2.Marshal(v)
	}
	buf := c.pool.Get(size)
	// UseCachedSize: the Size call above has just cached it.
	if _, err := (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend((*buf)[:0], m); err != nil {
		c.pool.Put(buf)
		return nil, fmt.Errorf("marshal %T: %w", v, err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}
