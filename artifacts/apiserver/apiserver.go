package apiserver

import "embed"

// FS holds the in-cluster manifests (*.yaml): apply them together with
// artifacts/operator. go:embed can only initialise a package-level variable;
// embed.FS is read-only, so it is not mutable state.
//
//go:embed *.yaml
var FS embed.FS

// Dev holds dev/*.yaml: the APIService and an ExternalName Service for an
// operator running on the developer's machine (make dev).
//
//go:embed dev/*.yaml
var Dev embed.FS

// Examples holds examples/*: lease manifests, a report body and crawler RBAC.
//
//go:embed examples/*
var Examples embed.FS
