// Command coredns is CoreDNS with only the plugins a cluster DNS add-on uses (the Corefile the local
// cluster's kube-dns runs), instead of every plugin upstream's build links in. The plugins keep upstream's
// execution order: the directive list is upstream's, filtered to the ones imported here.
package main

import (
	"fmt"
	"os"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The Corefile directives of the plugins imported above (metrics is configured as `prometheus`).
var kept = map[string]bool{
	"cache": true, "errors": true, "forward": true, "health": true, "kubernetes": true, "loadbalance": true,
	"log": true, "loop": true, "prometheus": true, "ready": true, "reload": true,
}

func main() {
	var directives []string
	for _, name := range dnsserver.Directives {
		if kept[name] {
			directives = append(directives, name)
		}
	}
	if len(directives) != len(kept) {
		fmt.Fprintf(os.Stderr, "coredns: upstream's directive list lacks some of %v (have %v)\n", kept, directives)
		os.Exit(2)
	}
	if err := dnsserver.SetDirectives(directives); err != nil {
		fmt.Fprintln(os.Stderr, "coredns:", err)
		os.Exit(2)
	}
	coremain.Run()
}
