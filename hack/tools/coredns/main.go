// Command coredns is CoreDNS with the plugins kubeadm's Corefile uses and a few for
// debugging: the kind node image's cluster DNS (test/kind). CoreDNS's own main links every
// plugin, cloud DNS providers included; this one links what a cluster's DNS needs.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
