module passmower-elector/bench/peers/client-go

go 1.24

// scripts/build-bench-peers.sh builds this in a scratch copy: it pins k8s.io/client-go and
// k8s.io/apimachinery to CLIENT_GO_VERSION with `go get` and lets `go mod tidy` add the rest.
require (
	k8s.io/apimachinery v0.37.2
	k8s.io/client-go v0.37.2
)
