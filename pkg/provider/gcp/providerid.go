package gcp

import "strings"

// ProviderID returns the providerID of an instance (docs/gcp.md): the short
// "zones/<zone>/instances/<name>" for an instance of the default project,
// and "projects/<project>/zones/<zone>/instances/<name>" otherwise, so Get
// and Delete reach the right instance even while a Proxy is being moved to
// another zone or project.
func ProviderID(defaultProject, project, zone, name string) string {
	id := "zones/" + zone + "/instances/" + name
	if project != "" && project != defaultProject {
		id = "projects/" + project + "/" + id
	}
	return id
}

// ParseProviderID is the inverse of ProviderID; ok is false for a string
// ProviderID never returns.
func ParseProviderID(defaultProject, id string) (project, zone, name string, ok bool) {
	parts := strings.Split(id, "/")
	project = defaultProject
	if len(parts) == 6 && parts[0] == "projects" {
		project, parts = parts[1], parts[2:]
	}
	if len(parts) != 4 || parts[0] != "zones" || parts[2] != "instances" {
		return "", "", "", false
	}
	zone, name = parts[1], parts[3]
	if project == "" || zone == "" || name == "" {
		return "", "", "", false
	}
	return project, zone, name, true
}

// scope is the Instance.Scope and unreachable-scope vocabulary:
// "projects/<p>/zones/<z>".
func scope(project, zone string) string { return "projects/" + project + "/zones/" + zone }
