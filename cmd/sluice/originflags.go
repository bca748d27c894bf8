package main

import (
	"flag"
	"strings"

	"github.com/sluice-io/sluice/gateway"
)

// originFlags are the browser allow-lists of `sluice gateway` and `sluice dev`.
type originFlags struct{ origins, hosts *string }

func addOriginFlags(fs *flag.FlagSet) originFlags {
	return originFlags{
		origins: fs.String("allowed-origins", envOr("SLUICE_ALLOWED_ORIGINS", ""), "comma-separated web origins besides the gateway's own whose pages may open WebSockets and change state, e.g. https://dash.example.com; with this or --allowed-hosts, a request whose Host is not a name of the gateway is refused (env SLUICE_ALLOWED_ORIGINS)"),
		hosts:   fs.String("allowed-hosts", envOr("SLUICE_ALLOWED_HOSTS", ""), "comma-separated names clients reach the gateway by, besides the hosts of --allowed-origins, localhost and IP addresses; turns the Host and Origin checks on (env SLUICE_ALLOWED_HOSTS)"),
	}
}

// apply sets the gateway's lists.
func (f originFlags) apply(o *gateway.Options) {
	o.AllowedOrigins, o.AllowedHosts = splitList(*f.origins), splitList(*f.hosts)
}

// splitList is a comma-separated list without blanks.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
