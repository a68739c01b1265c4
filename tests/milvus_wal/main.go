// milvus-wal-writer writes a scripted Milvus 2.6 history with Milvus's own code: messages built by
// Milvus's message builders and appended through its Kafka and Pulsar WAL implementations
// (github.com/milvus-io/milvus/pkg/v2), and meta put into etcd as Milvus's protos marshal it.
//
// Usage: milvus-wal-writer [SCRIPT]   (no SCRIPT or "-": the script is read from stdin)
//
// The script is JSON lines, one step each; for every step done one JSON line goes to stdout
// ({"step": n, "op": ..., ...}). Anything else (Milvus's and the clients' logs) goes to stderr. The
// first failing step stops the run with exit code 1 and the reason on stderr.
//
//	{"op": "open", "wal": "kafka"|"pulsar", "address": ..., "pchannel": ..., "term": 1}
//	    opens the pchannel for writing with Milvus's WAL implementation; "term" goes in `_wt`.
//	{"op": "append", "pchannel": ..., "vchannel": ..., "type": "Insert", "timetick": <uint64>,
//	 "last_confirmed": "self"|"step:N"|"<marshaled id>", "header": {...}, "body": {...},
//	 "txn": {"id": ..., "keepalive_ms": ...}, "cipher": true|{"ez_id", "collection_id"},
//	 "broadcast": {"vchannels": [...], "id": N}, "wal_term": false}
//	    builds the message with Milvus's New<Type>MessageBuilderV1/V2 (header and body are protojson
//	    of the type's messagespb header and its msgpb request or messagespb body), stamps it as a
//	    streaming node does and appends it. No "vchannel": a message of every vchannel (a TimeTick).
//	    Prints "id" (as `_lc` carries it), "offset" (Kafka offset, or Pulsar "ledger:entry" and
//	    "batch_index") and "properties" (as written).
//	{"op": "etcd_put", "endpoints": "host:port,...", "key": ..., "proto": "milvus.proto.etcd.CollectionInfo",
//	 "value": {...}} or {..., "raw": "<string>"}
//	    puts the binary proto Milvus's Go types marshal (or the raw string) at the key.
//	{"op": "etcd_delete", "endpoints": ..., "key": ...}
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"

	"go.uber.org/zap/zapcore"

	"github.com/milvus-io/milvus/pkg/v2/log"
)

func main() {
	results, err := takeStdout()
	if err != nil {
		fail(err)
	}
	log.SetLevel(zapcore.ErrorLevel)

	in := io.Reader(os.Stdin)
	if len(os.Args) > 1 && os.Args[1] != "-" {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fail(err)
		}
		defer f.Close()
		in = f
	}
	if err := run(in, results); err != nil {
		fail(err)
	}
}

// takeStdout keeps stdout for the result lines and points file descriptor 1 at stderr, so that
// whatever Milvus's logger or a C library prints cannot be mistaken for a result.
func takeStdout() (*os.File, error) {
	fd, err := syscall.Dup(1)
	if err != nil {
		return nil, err
	}
	if err := syscall.Dup3(2, 1, 0); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "results"), nil
}

func run(in io.Reader, results *os.File) error {
	ctx := context.Background()
	w := newWriter()
	defer w.close()
	etcd := etcdClients{}
	defer etcd.close()
	enc := json.NewEncoder(results)
	return readSteps(in, func(n int, s step) error {
		var out map[string]any
		var err error
		switch s.Op {
		case "open":
			out, err = w.open(ctx, s)
		case "append":
			out, err = w.append(ctx, n, s)
		case "etcd_put":
			out, err = etcd.put(ctx, s)
		case "etcd_delete":
			out, err = etcd.delete(ctx, s)
		default:
			err = fmt.Errorf("unknown op %q (open, append, etcd_put, etcd_delete)", s.Op)
		}
		if err != nil {
			return err
		}
		out["step"] = n
		out["op"] = s.Op
		return enc.Encode(out)
	})
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "milvus-wal-writer: %v\n", err)
	os.Exit(1)
}
