// milvus-wal-writer writes a scripted Milvus 2.6 history with Milvus's own code: messages built by
// Milvus's message builders and appended through its Kafka and Pulsar WAL implementations
// (github.com/milvus-io/milvus/pkg/v2), and meta put into etcd as Milvus's protos marshal it.
//
// Usage: milvus-wal-writer [SCRIPT]   (no SCRIPT or "-": the script is read from stdin)
//
// The script is JSON lines, one step each ("op": open, append, etcd_put, etcd_delete); for every
// step done one JSON line goes to stdout. Anything else (Milvus's and the clients' logs) goes to
// stderr. The first failing step stops the run with exit code 1 and the reason on stderr.
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
