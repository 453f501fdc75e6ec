// goref: minimal Go gRPC reference server for tests/bench/probe-bench.sh.
//
// Serves the unary method /csi.v1.Identity/Probe over plaintext h2c on a TCP
// address. Every request is accepted regardless of content and answered with an
// empty message (a proto3 empty ProbeResponse encodes to zero bytes) followed by
// grpc-status 0 trailers.
//
// No generated protobuf code is needed: the service is registered by hand with a
// grpc.ServiceDesc and the server uses a pass-through codec that moves raw bytes
// (grpc.ForceServerCodec: it overrides the codec for every content-subtype).
//
// Built against current grpc-go, pinned in go.mod, by scripts/go-tools.sh
// (tool grpc-goref), which probe-bench.sh calls.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
)

// rawMsg carries an undecoded message body.
type rawMsg []byte

// rawCodec implements the legacy grpc.Codec interface (Marshal/Unmarshal/String)
// and passes bytes through untouched.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) {
	switch m := v.(type) {
	case *rawMsg:
		return []byte(*m), nil
	case []byte:
		return m, nil
	default:
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
}

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	m, ok := v.(*rawMsg)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	// The buffer may be reused by grpc after Unmarshal returns; Probe ignores
	// the request anyway, so only keep the length-safe copy when non-empty.
	if len(data) > 0 {
		*m = append((*m)[:0], data...)
	} else {
		*m = (*m)[:0]
	}
	return nil
}

func (rawCodec) Name() string { return "proto" }

// identityServer is the (empty) handler interface required by ServiceDesc.
type identityServer interface{}

type identity struct{}

var emptyResponse = rawMsg{}

func probeHandler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	var req rawMsg
	if err := dec(&req); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return &emptyResponse, nil
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/csi.v1.Identity/Probe"}
	return interceptor(ctx, &req, info, func(ctx context.Context, _ interface{}) (interface{}, error) {
		return &emptyResponse, nil
	})
}

var identityServiceDesc = grpc.ServiceDesc{
	ServiceName: "csi.v1.Identity",
	HandlerType: (*identityServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Probe", Handler: probeHandler},
	},
	Streams:  []grpc.StreamDesc{},
	Metadata: "csi.proto",
}

func main() {
	listen := flag.String("listen", "127.0.0.1:50051", "TCP address to listen on (plaintext h2c)")
	flag.Parse()

	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("goref: listen %s: %v", *listen, err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	srv.RegisterService(&identityServiceDesc, identity{})

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		srv.Stop()
	}()

	log.Printf("goref: serving csi.v1.Identity on %s", lis.Addr())
	if err := srv.Serve(lis); err != nil {
		log.Fatalf("goref: serve: %v", err)
	}
}
