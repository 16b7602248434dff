// Module of the pause program, the sandbox image of the kind node image (test/kind).
module github.com/openmcp-project/service-provider-kro/hack/tools/pause

go 1.26.0
