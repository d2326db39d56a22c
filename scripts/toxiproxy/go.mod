// Pins Toxiproxy (Shopify's TCP fault proxy) for scripts/backends/toxiproxy.sh,
// which builds its server command from the Go module proxy:
//
//	go build -o toxiproxy github.com/Shopify/toxiproxy/v2/cmd/server
//
// The `tool` line keeps that package and its dependencies in go.sum (go mod
// tidy); there is no source of ours. To move to another release:
// go get -tool github.com/Shopify/toxiproxy/v2/cmd/server@vX.Y.Z && go mod tidy
module bakery/scripts/toxiproxy

go 1.24

tool github.com/Shopify/toxiproxy/v2/cmd/server

require (
	github.com/Shopify/toxiproxy/v2 v2.12.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/gorilla/mux v1.8.1 // indirect
	github.com/klauspost/compress v1.17.11 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.21.1 // indirect
	github.com/prometheus/client_model v0.6.1 // indirect
	github.com/prometheus/common v0.62.0 // indirect
	github.com/prometheus/procfs v0.15.1 // indirect
	github.com/rs/xid v1.5.0 // indirect
	github.com/rs/zerolog v1.33.0 // indirect
	golang.org/x/sys v0.31.0 // indirect
	google.golang.org/protobuf v1.36.1 // indirect
	gopkg.in/tomb.v1 v1.0.0-20141024135613-dd632973f1e7 // indirect
)
