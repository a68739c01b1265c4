package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/milvus-io/milvus/pkg/v2/streaming/util/message"
)

// messageSpec is what a script says about one message, before the WAL-side properties
// (time tick, last confirmed, term, transaction) are set on it.
type messageSpec struct {
	vchannel  string // "" for a message of every vchannel of the pchannel (a TimeTick)
	header    json.RawMessage
	body      json.RawMessage
	cipher    *message.CipherConfig
	broadcast *broadcastSpec
}

// buildFunc builds one mutable message of a given type with Milvus's own builder.
type buildFunc func(spec messageSpec) (message.MutableMessage, error)

// builder is the method set of Milvus's generic message builder (its type is not exported; the
// compiler infers it from the New*MessageBuilder function handed to kind).
type builder[H, B proto.Message, T any] interface {
	WithHeader(H) T
	WithBody(B) T
	WithVChannel(string) T
	WithAllVChannel() T
	WithBroadcast([]string, ...message.ResourceKey) T
	WithCipher(*message.CipherConfig) T
	BuildMutable() (message.MutableMessage, error)
	BuildBroadcast() (message.BroadcastMutableMessage, error)
}

// kind turns one of Milvus's New<Type>MessageBuilderV1/V2 functions into a buildFunc: the header
// and body are decoded from protojson into the builder's own proto types, so a field that Milvus's
// protos do not have fails the step.
func kind[H, B proto.Message, T builder[H, B, T]](newBuilder func() T) buildFunc {
	return func(spec messageSpec) (message.MutableMessage, error) {
		header, err := decodeInto[H](spec.header, "header")
		if err != nil {
			return nil, err
		}
		body, err := decodeInto[B](spec.body, "body")
		if err != nil {
			return nil, err
		}
		b := newBuilder().WithHeader(header).WithBody(body)
		if spec.cipher != nil {
			b = b.WithCipher(spec.cipher)
		}
		if spec.broadcast != nil {
			return splitOfBroadcast(b, spec)
		}
		if spec.vchannel == "" {
			b = b.WithAllVChannel()
		} else {
			b = b.WithVChannel(spec.vchannel)
		}
		return b.BuildMutable()
	}
}

// splitOfBroadcast builds the broadcast message and keeps the split for the step's vchannel, the
// way a broadcast reaches each of its vchannels' pchannels.
func splitOfBroadcast[H, B proto.Message, T builder[H, B, T]](b T, spec messageSpec) (message.MutableMessage, error) {
	if spec.vchannel == "" {
		return nil, fmt.Errorf("a broadcast split needs the vchannel it is for")
	}
	bm, err := b.WithBroadcast(spec.broadcast.VChannels).BuildBroadcast()
	if err != nil {
		return nil, err
	}
	if spec.broadcast.ID == 0 {
		return nil, fmt.Errorf("a broadcast needs a non-zero id")
	}
	for _, m := range bm.WithBroadcastID(spec.broadcast.ID).SplitIntoMutableMessage() {
		if m.VChannel() == spec.vchannel {
			return m, nil
		}
	}
	return nil, fmt.Errorf("vchannel %q is not among the broadcast's %v", spec.vchannel, spec.broadcast.VChannels)
}

// decodeInto makes a new M (a pointer to a generated proto message) from protojson; absent or
// null is the empty message.
func decodeInto[M proto.Message](raw json.RawMessage, what string) (M, error) {
	var zero M
	m := reflect.New(reflect.TypeOf(zero).Elem()).Interface().(M)
	if len(raw) == 0 || string(raw) == "null" {
		return m, nil
	}
	if err := protojson.Unmarshal(raw, m); err != nil {
		return zero, fmt.Errorf("%s is not a %s: %w", what, m.ProtoReflect().Descriptor().FullName(), err)
	}
	return m, nil
}

// kinds maps a messagespb.MessageType name to its builder: V1 types carry an msgpb request as
// their payload, V2 types a messagespb.*Body. Txn (999) has no entry: it is assembled by a reader
// from BeginTxn, the body messages and CommitTxn, and never written as such.
var kinds = map[string]buildFunc{
	"TimeTick":             kind[*message.TimeTickMessageHeader, *message.TimeTickMsg](message.NewTimeTickMessageBuilderV1),
	"Insert":               kind[*message.InsertMessageHeader, *message.InsertRequest](message.NewInsertMessageBuilderV1),
	"Delete":               kind[*message.DeleteMessageHeader, *message.DeleteRequest](message.NewDeleteMessageBuilderV1),
	"CreateCollection":     kind[*message.CreateCollectionMessageHeader, *message.CreateCollectionRequest](message.NewCreateCollectionMessageBuilderV1),
	"DropCollection":       kind[*message.DropCollectionMessageHeader, *message.DropCollectionRequest](message.NewDropCollectionMessageBuilderV1),
	"CreatePartition":      kind[*message.CreatePartitionMessageHeader, *message.CreatePartitionRequest](message.NewCreatePartitionMessageBuilderV1),
	"DropPartition":        kind[*message.DropPartitionMessageHeader, *message.DropPartitionRequest](message.NewDropPartitionMessageBuilderV1),
	"Import":               kind[*message.ImportMessageHeader, *message.ImportMsg](message.NewImportMessageBuilderV1),
	"CreateSegment":        kind[*message.CreateSegmentMessageHeader, *message.CreateSegmentMessageBody](message.NewCreateSegmentMessageBuilderV2),
	"Flush":                kind[*message.FlushMessageHeader, *message.FlushMessageBody](message.NewFlushMessageBuilderV2),
	"ManualFlush":          kind[*message.ManualFlushMessageHeader, *message.ManualFlushMessageBody](message.NewManualFlushMessageBuilderV2),
	"AlterReplicateConfig": kind[*message.AlterReplicateConfigMessageHeader, *message.AlterReplicateConfigMessageBody](message.NewAlterReplicateConfigMessageBuilderV2),
	"BeginTxn":             kind[*message.BeginTxnMessageHeader, *message.BeginTxnMessageBody](message.NewBeginTxnMessageBuilderV2),
	"CommitTxn":            kind[*message.CommitTxnMessageHeader, *message.CommitTxnMessageBody](message.NewCommitTxnMessageBuilderV2),
	"RollbackTxn":          kind[*message.RollbackTxnMessageHeader, *message.RollbackTxnMessageBody](message.NewRollbackTxnMessageBuilderV2),
	"SchemaChange":         kind[*message.SchemaChangeMessageHeader, *message.SchemaChangeMessageBody](message.NewSchemaChangeMessageBuilderV2),
	"AlterCollection":      kind[*message.AlterCollectionMessageHeader, *message.AlterCollectionMessageBody](message.NewAlterCollectionMessageBuilderV2),
	"AlterLoadConfig":      kind[*message.AlterLoadConfigMessageHeader, *message.AlterLoadConfigMessageBody](message.NewAlterLoadConfigMessageBuilderV2),
	"DropLoadConfig":       kind[*message.DropLoadConfigMessageHeader, *message.DropLoadConfigMessageBody](message.NewDropLoadConfigMessageBuilderV2),
	"CreateDatabase":       kind[*message.CreateDatabaseMessageHeader, *message.CreateDatabaseMessageBody](message.NewCreateDatabaseMessageBuilderV2),
	"AlterDatabase":        kind[*message.AlterDatabaseMessageHeader, *message.AlterDatabaseMessageBody](message.NewAlterDatabaseMessageBuilderV2),
	"DropDatabase":         kind[*message.DropDatabaseMessageHeader, *message.DropDatabaseMessageBody](message.NewDropDatabaseMessageBuilderV2),
	"AlterAlias":           kind[*message.AlterAliasMessageHeader, *message.AlterAliasMessageBody](message.NewAlterAliasMessageBuilderV2),
	"DropAlias":            kind[*message.DropAliasMessageHeader, *message.DropAliasMessageBody](message.NewDropAliasMessageBuilderV2),
	"CreateIndex":          kind[*message.CreateIndexMessageHeader, *message.CreateIndexMessageBody](message.NewCreateIndexMessageBuilderV2),
	"AlterIndex":           kind[*message.AlterIndexMessageHeader, *message.AlterIndexMessageBody](message.NewAlterIndexMessageBuilderV2),
	"DropIndex":            kind[*message.DropIndexMessageHeader, *message.DropIndexMessageBody](message.NewDropIndexMessageBuilderV2),
}

// kindNames lists the types a script may name, for an error message.
func kindNames() []string {
	names := make([]string, 0, len(kinds))
	for name := range kinds {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
