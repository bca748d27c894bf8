// Package deploy holds no code: it is the home of the deploy files (the
// Dockerfile, the compose stack, the Kubernetes manifests and the Grafana
// dashboard) and of their tests.
//
// It is a Go module of its own so that what the tests need to read those
// files as Docker and Kubernetes do (the compose-spec loader, the Kubernetes
// API types, kustomize) never enters the sluice module's dependencies. The
// tests run the sluice binary built from the parent module, as a user would.
package deploy
