package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// frame is one gRPC message, still encoded. The proxy never decodes what
// it forwards, so every service passes, those etcd adds later included,
// and no field is lost for want of knowing it.
type frame struct{ b []byte }

// rawCodec moves frames as they are. Its name goes into the content type
// (application/grpc+proto), which the server behind the proxy checks; the
// bytes are protobuf, so "proto" is the truth.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("proxy: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(f.b)}, nil
}

// Unmarshal copies: gRPC reuses data once Unmarshal returns, and a frame
// lives on until it is sent on.
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("proxy: cannot unmarshal into %T", v)
	}
	f.b = data.Materialize()
	return nil
}

// bidi describes every call as a stream both ways: a unary call is a
// stream of one message each way, and forwarding it so costs nothing.
var bidi = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// forward serves one call of any method by opening the same method on
// the upstream connection and copying messages both ways until the
// upstream ends the call; its status, headers and trailers go back to the
// client unchanged. The client's metadata (its auth token, etcd's
// require-leader flag) goes upstream unchanged, and so does its deadline,
// which is the context's.
func (p *Proxy) forward(_ any, in grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(in)
	if !ok {
		return status.Error(codes.Internal, "proxy: no method on the stream")
	}
	ctx, cancel := context.WithCancel(in.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(ctx)
	ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	out, err := p.upstream.ActiveConnection().NewStream(ctx, bidi, method, p.callOpts...)
	if err != nil {
		return err
	}
	go p.sendUp(in, out)
	headerSent := false
	for {
		var f frame
		err := out.RecvMsg(&f)
		if !headerSent {
			// Headers come before the first message or with an error
			// that ends the call; either way they are known now.
			if h, herr := out.Header(); herr == nil && len(h) > 0 {
				if err := in.SendHeader(h); err != nil {
					return err
				}
			}
			headerSent = true
		}
		if err != nil {
			in.SetTrailer(out.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := in.SendMsg(&f); err != nil {
			return err
		}
	}
}

// sendUp copies the client's messages upstream and closes the upstream
// send side when the client closes its own, so a call the client half
// closes (a unary request, a watch it will send no more on) goes on
// answering. An error either way ends the copying; the call's outcome is
// what the upstream answers, which forward returns.
func (p *Proxy) sendUp(in grpc.ServerStream, out grpc.ClientStream) {
	for {
		var f frame
		if err := in.RecvMsg(&f); err != nil {
			if errors.Is(err, io.EOF) {
				out.CloseSend()
			}
			return
		}
		if err := out.SendMsg(&f); err != nil {
			return
		}
	}
}
