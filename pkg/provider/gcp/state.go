package gcp

import (
	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// stateOf maps a Compute Engine instance status onto the provider states:
//
//	PROVISIONING, STAGING                   → Provisioning
//	RUNNING with a natIP                    → Running
//	RUNNING without a natIP yet             → Provisioning (not reachable)
//	STOPPING, SUSPENDING, SUSPENDED,
//	STOPPED, TERMINATED, REPAIRING          → Stopped (delete and recreate)
//	anything else                           → Stopped (Decision: the safe answer)
//
// TERMINATED is a stopped VM in Compute Engine (preempted Spot VMs end
// there), not a deleted one, so it is Stopped rather than Terminated.
func stateOf(status, natIP string) provider.InstanceState {
	switch status {
	case computepb.Instance_PROVISIONING.String(), computepb.Instance_STAGING.String():
		return provider.StateProvisioning
	case computepb.Instance_RUNNING.String():
		if natIP == "" {
			return provider.StateProvisioning
		}
		return provider.StateRunning
	default:
		return provider.StateStopped
	}
}

// natIPOf is the address of the first access config of the first interface,
// where ONE_TO_ONE_NAT puts the external address.
func natIPOf(inst *computepb.Instance) string {
	nis := inst.GetNetworkInterfaces()
	if len(nis) == 0 || len(nis[0].GetAccessConfigs()) == 0 {
		return ""
	}
	return nis[0].GetAccessConfigs()[0].GetNatIP()
}
