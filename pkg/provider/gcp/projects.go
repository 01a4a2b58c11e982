package gcp

// listProjects is what ListByTag covers: --gcp-project and
// --gcp-allowed-projects, the only projects Create accepts. A project only a
// Proxy names is never listed: the garbage collector deletes what a listing
// holds and no Proxy owns, and another installation's VMs there are not
// ours.
func (p *Provider) listProjects() []string { return p.opts.projects() }
