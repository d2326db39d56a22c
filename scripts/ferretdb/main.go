// Command ferretdb runs FerretDB v1 (the MongoDB wire protocol over
// PostgreSQL) for scripts/backends.sh, standing in for mongod, which no
// package registry reachable from CI ships.
//
// It exists because the binary built by
// `go install github.com/FerretDB/FerretDB/cmd/ferretdb@v1.24.x` panics at
// start: that main package wants build/version/version.txt, a file generated
// in FerretDB's own checkout (FerretDB issue 2982).  The embeddable package
// github.com/FerretDB/FerretDB/ferretdb has no such requirement.
//
// Build with -tags ferretdb_no_sqlite (only the PostgreSQL handler is used).
//
//	ferretdb -listen 127.0.0.1:17017 -postgresql-url postgres://postgres@127.0.0.1:15432/ferretdb
//
// It serves until SIGTERM or SIGINT, then closes the listener and the pool.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:27017", "TCP address to listen on")
	pgURL := flag.String("postgresql-url", "", "PostgreSQL URL of the database FerretDB stores its data in")
	debug := flag.Bool("debug", false, "log at debug level")
	flag.Parse()

	if *pgURL == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: ferretdb -listen HOST:PORT -postgresql-url URL [-debug]")
		os.Exit(2)
	}

	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	f, err := ferretdb.New(&ferretdb.Config{
		Listener:      ferretdb.ListenerConfig{TCP: *listen},
		Logger:        logger,
		Handler:       "postgresql",
		PostgreSQLURL: *pgURL,
	})
	if err != nil {
		logger.Error("cannot start FerretDB", slog.String("error", err.Error()))
		os.Exit(1)
	}

	logger.Info("FerretDB (embedded) starting", slog.String("listen", *listen))

	if err = f.Run(ctx); err != nil {
		logger.Error("FerretDB stopped with an error", slog.String("error", err.Error()))
		os.Exit(1)
	}

	logger.Info("FerretDB stopped")
}
