module github.com/heraldhq/herald

go 1.26.8

require (
	github.com/go-resty/resty/v2 v2.17.2
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.43.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
