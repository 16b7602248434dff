package testenv

import "github.com/openmcp-project/service-provider-kro/test/toolbuild"

// E2ETools lists every command the end-to-end suite needs: the sandbox's and
// openmcp-operator.
func E2ETools() []Tool { return toolbuild.E2ETools() }
