package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// step is one line of the script: an operation and its arguments. Unknown keys are refused, so a
// typo in a script fails instead of being ignored.
type step struct {
	Op string `json:"op"`

	// open, append
	WAL      string `json:"wal"`
	Address  string `json:"address"`
	PChannel string `json:"pchannel"`
	Term     *int64 `json:"term"`

	// append
	VChannel      string          `json:"vchannel"`
	Type          string          `json:"type"`
	TimeTick      *uint64         `json:"timetick"`
	LastConfirmed string          `json:"last_confirmed"`
	Header        json.RawMessage `json:"header"`
	Body          json.RawMessage `json:"body"`
	Txn           *txnSpec        `json:"txn"`
	Cipher        json.RawMessage `json:"cipher"`
	Broadcast     *broadcastSpec  `json:"broadcast"`
	WALTerm       *bool           `json:"wal_term"`

	// etcd_put, etcd_delete
	Endpoints string          `json:"endpoints"`
	Key       string          `json:"key"`
	Proto     string          `json:"proto"`
	Value     json.RawMessage `json:"value"`
	Raw       *string         `json:"raw"`
}

// txnSpec is the transaction context a message carries in `_tx`.
type txnSpec struct {
	ID          int64 `json:"id"`
	KeepaliveMS int64 `json:"keepalive_ms"`
}

// broadcastSpec makes the message one split of a broadcast, as the streaming coordinator sends a
// DDL to every vchannel of a collection: `_bh` names all of them and the broadcast id.
type broadcastSpec struct {
	VChannels []string `json:"vchannels"`
	ID        uint64   `json:"id"`
}

// cipherSpec is the encryption zone and collection a payload is encrypted for (`_ch`).
type cipherSpec struct {
	EzID         int64 `json:"ez_id"`
	CollectionID int64 `json:"collection_id"`
}

// readSteps yields the script's steps one at a time, so results stream out as each step is done
// (a caller can drive the writer through a pipe). Blank lines and lines starting with # are skipped.
func readSteps(r io.Reader, each func(n int, s step) error) error {
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 1<<20), 256<<20)
	n := 0
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		var s step
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return fmt.Errorf("step %d: not a step: %w", n, err)
		}
		if err := each(n, s); err != nil {
			return fmt.Errorf("step %d (%s): %w", n, s.Op, err)
		}
	}
	return scanner.Err()
}
