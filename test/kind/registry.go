package kind

import (
	"bytes"
	"fmt"

	kindcluster "sigs.k8s.io/kind/pkg/cluster"
)

// CertsDir is where containerd looks for a registry's host configuration (the
// config_path of its CRI registry settings, which kind's containerd configuration sets):
// CertsDir/<host:port>/hosts.toml.
const CertsDir = "/etc/containerd/certs.d"

// HostsTOML is containerd's host configuration for a registry served over TLS with a
// certificate of a private CA, stored as caFile beside it. containerd reads it at each
// pull, so neither containerd nor the node restarts.
func HostsTOML(host, caFile string) string {
	return fmt.Sprintf(`server = "https://%[1]s"

[host."https://%[1]s"]
  capabilities = ["pull", "resolve"]
  ca = %[2]q
`, host, caFile)
}

// TrustRegistry makes every node of the cluster trust the registry at host (host:port)
// with the CA caPEM, the way a platform team configures its nodes for a private registry:
// the CA and a hosts.toml in CertsDir/<host>. Credentials stay in pull secrets.
func TrustRegistry(p *kindcluster.Provider, cluster, host string, caPEM []byte) error {
	nodes, err := p.ListInternalNodes(cluster)
	if err != nil {
		return err
	}
	dir := CertsDir + "/" + host
	for _, n := range nodes {
		for file, content := range map[string]string{dir + "/ca.crt": string(caPEM), dir + "/hosts.toml": HostsTOML(host, dir+"/ca.crt")} {
			var out bytes.Buffer
			cmd := n.Command("sh", "-c", `mkdir -p "$(dirname "$1")" && cat > "$1"`, "sh", file)
			cmd.SetStdin(bytes.NewBufferString(content)).SetStdout(&out).SetStderr(&out)
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("writing %s on %s: %w\n%s", file, n.String(), err, out.String())
			}
		}
	}
	return nil
}
