package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Milvus's meta protos, registered by name for "proto" in an etcd_put step.
	_ "github.com/milvus-io/milvus-proto/go-api/v2/msgpb"
	_ "github.com/milvus-io/milvus-proto/go-api/v2/schemapb"
	_ "github.com/milvus-io/milvus/pkg/v2/proto/datapb"
	_ "github.com/milvus-io/milvus/pkg/v2/proto/etcdpb"
	_ "github.com/milvus-io/milvus/pkg/v2/proto/querypb"
	_ "github.com/milvus-io/milvus/pkg/v2/proto/rootcoordpb"
	_ "github.com/milvus-io/milvus/pkg/v2/proto/streamingpb"
)

// etcdTimeout bounds one etcd request.
const etcdTimeout = 10 * time.Second

// etcdClients keeps one client per endpoint list for the run.
type etcdClients map[string]*clientv3.Client

func (c etcdClients) get(endpoints string) (*clientv3.Client, error) {
	if cli, ok := c[endpoints]; ok {
		return cli, nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: etcdTimeout})
	if err != nil {
		return nil, err
	}
	c[endpoints] = cli
	return cli, nil
}

// metaValue is the value Milvus stores: the binary proto of the named message, decoded from
// protojson (a field the proto does not have fails), or a raw string.
func metaValue(s step) ([]byte, error) {
	if s.Raw != nil {
		if s.Proto != "" || len(s.Value) != 0 {
			return nil, fmt.Errorf("raw excludes proto and value")
		}
		return []byte(*s.Raw), nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(s.Proto))
	if err != nil {
		return nil, fmt.Errorf("proto %q: %w", s.Proto, err)
	}
	m := mt.New().Interface()
	if err := protojson.Unmarshal(s.Value, m); err != nil {
		return nil, fmt.Errorf("value is not a %s: %w", s.Proto, err)
	}
	return proto.Marshal(m)
}

func (c etcdClients) put(ctx context.Context, s step) (map[string]any, error) {
	if s.Endpoints == "" || s.Key == "" {
		return nil, fmt.Errorf("etcd_put needs endpoints and a key")
	}
	value, err := metaValue(s)
	if err != nil {
		return nil, err
	}
	cli, err := c.get(s.Endpoints)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	resp, err := cli.Put(ctx, s.Key, string(value))
	if err != nil {
		return nil, err
	}
	return map[string]any{"key": s.Key, "bytes": len(value), "revision": resp.Header.Revision}, nil
}

func (c etcdClients) delete(ctx context.Context, s step) (map[string]any, error) {
	if s.Endpoints == "" || s.Key == "" {
		return nil, fmt.Errorf("etcd_delete needs endpoints and a key")
	}
	cli, err := c.get(s.Endpoints)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	resp, err := cli.Delete(ctx, s.Key)
	if err != nil {
		return nil, err
	}
	return map[string]any{"key": s.Key, "deleted": resp.Deleted}, nil
}

func (c etcdClients) close() {
	for _, cli := range c {
		_ = cli.Close()
	}
}
