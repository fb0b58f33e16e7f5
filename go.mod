module github.com/towerd/towerd

go 1.26

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7
	github.com/miekg/dns v1.1.73
	github.com/pelletier/go-toml/v2 v2.4.3
	go.uber.org/goleak v1.3.0
)

require (
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
