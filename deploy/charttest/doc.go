// Package charttest renders the Helm chart in helm/writeback with bin/helm
// (built by `make chart-test`) and checks the manifests: every one decodes
// strictly into its Kubernetes API type, the sidecar, probes, Secret
// references, preStop hook and configuration are where they belong, the
// rendered writeback.yaml passes the sidecar's own config loader, and bad
// values fail with the schema's message.
//
// It is a separate Go module so that the main module stays free of
// Kubernetes dependencies.
package charttest
