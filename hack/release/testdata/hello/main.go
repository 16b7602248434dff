// Command hello stands in for the provider's binary in hack/release's test: small to
// cross-compile, and linking one module so that its SBOM lists a dependency.
package main

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

func main() {
	out, _ := yaml.Marshal(map[string]string{"hello": "release"})
	fmt.Print(string(out))
}
