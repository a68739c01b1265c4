package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/milvus-io/milvus-proto/go-api/v2/commonpb"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/message"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/types"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls/impls/kafka"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls/impls/pulsar"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls/registry"
	"github.com/milvus-io/milvus/pkg/v2/util/paramtable"
)

// The WAL implementations register themselves with the registry when imported; naming them here
// keeps the imports explicit.
var (
	_ = kafka.NewKafkaID
	_ = pulsar.NewPulsarID
)

// appendTimeout bounds one append (a broker that is away fails the step instead of hanging).
const appendTimeout = 60 * time.Second

// openWAL is one pchannel opened for writing, with the term its messages carry in `_wt`.
type openWAL struct {
	name message.WALName
	impl walimpls.WALImpls
	term int64
}

// writer holds the WAL openers and the opened pchannels of one run, and the id each append got
// (for a later step's "last_confirmed": "step:N").
type writer struct {
	openers map[string]walimpls.OpenerImpls // by wal name and address
	wals    map[string]*openWAL             // by pchannel
	ids     map[int]message.MessageID       // by step number
}

func newWriter() *writer {
	// As a streaming node starts: the param table from its defaults (no milvus.yaml here), without
	// the remote etcd config source and without the environment, so nothing outside the script
	// changes what is written.
	paramtable.InitWithBaseTable(paramtable.NewBaseTable(paramtable.SkipRemote(true), paramtable.SkipEnv(true)))
	return &writer{
		openers: map[string]walimpls.OpenerImpls{},
		wals:    map[string]*openWAL{},
		ids:     map[int]message.MessageID{},
	}
}

// configure points Milvus's param table at the broker the opener is about to be built for.
func configure(walName, address string) (message.WALName, error) {
	base := paramtable.GetBaseTable()
	switch walName {
	case "kafka":
		base.Save("kafka.brokerList", address)
		return message.WALNameKafka, nil
	case "pulsar":
		if !strings.Contains(address, "://") {
			address = "pulsar://" + address
		}
		base.Save("pulsar.address", address)
		base.Save("pulsar.enableClientMetrics", "false")
		// 0: Milvus keeps a "truncate-cursor" subscription at the earliest message instead of a
		// backlog-clearing one at the latest, so nothing the fixture writes becomes deletable.
		base.Save("pulsar.backlogAutoClearBytes", "0")
		return message.WALNamePulsar, nil
	}
	return message.WALNameUnknown, fmt.Errorf("unknown wal %q (kafka or pulsar)", walName)
}

func (w *writer) open(ctx context.Context, s step) (map[string]any, error) {
	if s.PChannel == "" || s.Address == "" {
		return nil, fmt.Errorf("open needs a pchannel and an address")
	}
	if _, ok := w.wals[s.PChannel]; ok {
		return nil, fmt.Errorf("pchannel %s is already open", s.PChannel)
	}
	name, err := configure(s.WAL, s.Address)
	if err != nil {
		return nil, err
	}
	key := s.WAL + "|" + s.Address
	opener, ok := w.openers[key]
	if !ok {
		if opener, err = registry.MustGetBuilder(name).Build(); err != nil {
			return nil, fmt.Errorf("building the %s opener: %w", s.WAL, err)
		}
		w.openers[key] = opener
	}
	term := int64(1)
	if s.Term != nil {
		term = *s.Term
	}
	impl, err := opener.Open(ctx, &walimpls.OpenOption{Channel: types.PChannelInfo{
		Name: s.PChannel, Term: term, AccessMode: types.AccessModeRW,
	}})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", s.PChannel, err)
	}
	w.wals[s.PChannel] = &openWAL{name: name, impl: impl, term: term}
	return map[string]any{"wal": s.WAL, "pchannel": s.PChannel, "term": term}, nil
}

func (w *writer) append(ctx context.Context, n int, s step) (map[string]any, error) {
	wal, ok := w.wals[s.PChannel]
	if !ok {
		return nil, fmt.Errorf("pchannel %q is not open (an open step first)", s.PChannel)
	}
	build, ok := kinds[s.Type]
	if !ok {
		return nil, fmt.Errorf("unknown message type %q; known: %s", s.Type, strings.Join(kindNames(), ", "))
	}
	spec := messageSpec{vchannel: s.VChannel, header: s.Header, body: s.Body, broadcast: s.Broadcast}
	cipher, err := cipherConfig(s)
	if err != nil {
		return nil, err
	}
	spec.cipher = cipher
	msg, err := build(spec)
	if err != nil {
		return nil, err
	}
	if err := w.stamp(msg, wal, s); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, appendTimeout)
	defer cancel()
	id, err := wal.impl.Append(ctx, msg)
	if err != nil {
		return nil, fmt.Errorf("append to %s: %w", s.PChannel, err)
	}
	w.ids[n] = id
	out := map[string]any{
		"pchannel":   s.PChannel,
		"vchannel":   s.VChannel,
		"type":       s.Type,
		"id":         id.Marshal(),
		"properties": msg.Properties().ToRawMap(),
	}
	for k, v := range position(id) {
		out[k] = v
	}
	return out, nil
}

// stamp sets what the streaming node sets on a message before the WAL writes it: the term of the
// WAL (the WAL adaptor), the time tick and last confirmed id (the time tick interceptor), the
// transaction context (the client for body messages, the interceptor for BeginTxn).
func (w *writer) stamp(msg message.MutableMessage, wal *openWAL, s step) error {
	if s.TimeTick == nil {
		return fmt.Errorf("append needs a timetick")
	}
	if s.WALTerm == nil || *s.WALTerm {
		msg.WithWALTerm(wal.term)
	}
	msg.WithTimeTick(*s.TimeTick)
	switch lc := s.LastConfirmed; {
	case lc == "":
	case lc == "self":
		msg.WithLastConfirmedUseMessageID()
	case strings.HasPrefix(lc, "step:"):
		n, err := strconv.Atoi(strings.TrimPrefix(lc, "step:"))
		if err != nil {
			return fmt.Errorf("last_confirmed %q: %w", lc, err)
		}
		id, ok := w.ids[n]
		if !ok {
			return fmt.Errorf("last_confirmed %q: step %d appended nothing", lc, n)
		}
		msg.WithLastConfirmed(id)
	default:
		id, err := message.UnmarshalMessageID(&commonpb.MessageID{WALName: commonpb.WALName(wal.name), Id: lc})
		if err != nil {
			return fmt.Errorf("last_confirmed %q is not a %s message id: %w", lc, wal.name, err)
		}
		msg.WithLastConfirmed(id)
	}
	if s.Txn != nil {
		msg.WithTxnContext(message.TxnContext{
			TxnID:     message.TxnID(s.Txn.ID),
			Keepalive: time.Duration(s.Txn.KeepaliveMS) * time.Millisecond,
		})
	}
	return nil
}

// cipherConfig reads "cipher": false/true or {"ez_id", "collection_id"}; true takes encryption
// zone 1 and the collection id of the message's header.
func cipherConfig(s step) (*message.CipherConfig, error) {
	raw := strings.TrimSpace(string(s.Cipher))
	switch raw {
	case "", "null", "false":
		return nil, nil
	case "true":
		var h struct {
			CollectionID json.Number `json:"collectionId"`
			Snake        json.Number `json:"collection_id"`
		}
		_ = json.Unmarshal(s.Header, &h)
		id := h.CollectionID
		if id == "" {
			id = h.Snake
		}
		collectionID, err := id.Int64()
		if err != nil {
			return nil, fmt.Errorf("cipher: true needs the header's collection_id: %w", err)
		}
		message.RegisterCipher(testCipher{})
		return &message.CipherConfig{EzID: 1, CollectionID: collectionID}, nil
	}
	var c cipherSpec
	if err := json.Unmarshal(s.Cipher, &c); err != nil {
		return nil, fmt.Errorf("cipher: %w", err)
	}
	message.RegisterCipher(testCipher{})
	return &message.CipherConfig{EzID: c.EzID, CollectionID: c.CollectionID}, nil
}

// position is where the message landed, as the broker names it: the Kafka offset (partition 0),
// or the Pulsar ledger:entry and batch index.
func position(id message.MessageID) map[string]any {
	switch v := id.(type) {
	case interface{ KafkaID() kafkaOffset }:
		return map[string]any{"offset": int64(v.KafkaID())}
	case interface{ PulsarID() pulsarMessageID }:
		p := v.PulsarID()
		return map[string]any{
			"offset":      fmt.Sprintf("%d:%d", p.LedgerID(), p.EntryID()),
			"batch_index": p.BatchIdx(),
		}
	}
	return map[string]any{"offset": id.String()}
}

// close closes every pchannel, then the openers (their producers and clients).
func (w *writer) close() {
	for _, wal := range w.wals {
		wal.impl.Close()
	}
	for _, opener := range w.openers {
		opener.Close()
	}
}
