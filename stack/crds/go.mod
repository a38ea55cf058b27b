// Upstream modules whose files (CRDs, JSON Schemas) gpuaas reads but whose programs it does not run:
// the real-stack tier installs these CRDs, and `gpuaas render` validates against them. No Go code
// imports them, so never `go mod tidy` this file (it would drop every line); gpuaas.upstream runs
// `go mod download` on each module named here. Modules that also pin a program (Kueue, KEDA, Argo)
// (and KubeRay, the training-operator) are read from the go.mod that builds it, so a schema always
// matches the binary that runs.
module gpuaas.local/stack/crds

go 1.26.0

require (
	github.com/kserve/kserve v0.15.2
	github.com/openshift/api v0.0.0-20251015095338-264e80a2b6e7
	sigs.k8s.io/cluster-api v1.11.3
	sigs.k8s.io/lws v0.9.0
)
