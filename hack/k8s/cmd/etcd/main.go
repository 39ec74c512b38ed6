// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 at
// the version Kubernetes itself pins (see go.mod), for the e2e control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
