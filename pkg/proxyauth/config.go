package proxyauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// HelperConfig is everything a proxy's helper needs, written where the
// proxy reads it: a Secret volume of a Squid pod, the metadata of a VM. It
// holds the proxy's own key and nothing that verifies another proxy's
// credentials.
type HelperConfig struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Key is the proxy's key (Keyring.ProxyKey).
	Key []byte `json:"key"`
	// OperatorURL is where the helper polls the live list
	// (OperatorURL + LivePath); empty: no list, credentials last until they
	// expire.
	OperatorURL string `json:"operatorURL,omitempty"`
	// CAPEM verifies the operator's serving certificate (empty: the
	// system's roots).
	CAPEM string `json:"caPEM,omitempty"`
	// Egress is where the helper's relay takes a lease's traffic (the same
	// rules as the squid.conf's, checked again on the address it dials).
	Egress Egress `json:"egress"`
}

// HelperConfig returns the helper configuration of p.
func (k *Keyring) HelperConfig(p ProxyRef, operatorURL, caPEM string) HelperConfig {
	return HelperConfig{Namespace: p.Namespace, Name: p.Name, Key: k.ProxyKey(p), OperatorURL: operatorURL, CAPEM: caPEM}
}

// Proxy is the proxy the configuration belongs to.
func (c HelperConfig) Proxy() ProxyRef { return ProxyRef{Namespace: c.Namespace, Name: c.Name} }

// Marshal is the configuration as the helper reads it.
func (c HelperConfig) Marshal() []byte {
	b, _ := json.Marshal(c) // only strings and bytes: cannot fail
	return b
}

// ParseHelperConfig reads a configuration written by Marshal.
func ParseHelperConfig(b []byte) (HelperConfig, error) {
	var c HelperConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return HelperConfig{}, fmt.Errorf("proxy auth helper config: %w", err)
	}
	return c, c.Validate()
}

// Validate reports a configuration a helper cannot run with.
func (c HelperConfig) Validate() error {
	var errs []error
	if c.Namespace == "" || c.Name == "" {
		errs = append(errs, errors.New("namespace and name are required"))
	}
	if len(c.Key) != 32 {
		errs = append(errs, fmt.Errorf("key: %d bytes, want 32", len(c.Key)))
	}
	if c.OperatorURL != "" {
		if u, err := url.Parse(c.OperatorURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, fmt.Errorf("operatorURL %q: want an absolute http(s) URL", c.OperatorURL))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("proxy auth helper config: %w", errors.Join(errs...))
	}
	return nil
}

// Timing of the helper and of Squid's cache of its answers: a released
// lease's credentials stop working within PollInterval + CredentialsTTL (plus
// one poll's duration), 20 seconds.
const (
	// PollInterval is how often a helper reads its proxy's live list.
	PollInterval = 10 * time.Second
	// CredentialsTTL is how long Squid trusts the helper's answer for one
	// username and password.
	CredentialsTTL = 10 * time.Second
	// StaleAfter is the age past which a helper no longer trusts its list
	// (the operator unreachable, or no replica leading): credentials then
	// last until they expire.
	StaleAfter = time.Minute
)

// DefaultRelayAddr is where a pod's or a VM's helper relays Squid's
// traffic: loopback of the pod's own network namespace, or of the VM.
const DefaultRelayAddr = "127.0.0.1:3129"

// SquidAuthConfig is the squid.conf stanza that makes Squid ask every
// client for credentials (407 without valid ones), check them with the
// helper at helperPath reading the configuration at configPath, send what
// it accepts through the helper's relay on relayAddr, and take a lease's
// requests only where e allows (403 elsewhere): SquidAuthParams and
// SquidLeaseRules. Put it before any other http_access line.
func SquidAuthConfig(helperPath, configPath, relayAddr string, e Egress) string {
	return SquidAuthParams(helperPath, configPath, relayAddr) + SquidLeaseRules(e)
}

// SquidAuthParams are the lines that run the helper: the helper at
// helperPath reading the configuration at configPath checks every client's
// credentials, and every request Squid takes goes through the relay on
// relayAddr ("ip:port", loopback; RelayCommand), which ends a lease's
// traffic when the lease ends.
// Idle client connections close after CredentialsTTL + PollInterval, so a
// released lease's keep-alive connections go with it.
func SquidAuthParams(helperPath, configPath, relayAddr string) string {
	host, port, _ := net.SplitHostPort(relayAddr)
	lines := []string{
		fmt.Sprintf("auth_param basic program %s --config %s", helperPath, configPath),
		// One helper process answering concurrently: one live list, one poll.
		"auth_param basic children 1 startup=1 idle=1 concurrency=256",
		"auth_param basic realm proxy-operator",
		fmt.Sprintf("auth_param basic credentialsttl %d seconds", int(CredentialsTTL.Seconds())),
		"auth_param basic casesensitive on",
		// Every request through the relay, with its credentials; never
		// straight to the destination.
		fmt.Sprintf("cache_peer %s parent %s 0 no-query no-digest no-netdb-exchange default login=PASSTHRU name=proxy-operator-relay", host, port),
		"never_direct allow all",
		fmt.Sprintf("client_idle_pconn_timeout %d seconds", int((CredentialsTTL + PollInterval).Seconds())),
	}
	return strings.Join(lines, "\n") + "\n"
}

// RelayCommand is the command line that runs Squid (squid: its command
// line) behind the relay: the helper at helperPath relays on relayAddr with
// the configuration at configPath, and starts Squid once it listens.
func RelayCommand(helperPath, configPath, relayAddr string, squid ...string) []string {
	return append([]string{helperPath, "relay", "--config", configPath, "--listen", relayAddr, "--"}, squid...)
}

// SquidLeaseRules are the acl and http_access lines after the auth_param
// ones: no lease's credentials, no access (407); a lease's requests only
// where e allows (403 elsewhere); nothing else.
func SquidLeaseRules(e Egress) string {
	return "acl proxy_operator_lease proxy_auth REQUIRED\n" +
		"http_access deny !proxy_operator_lease\n" +
		e.SquidRules() +
		"http_access allow proxy_operator_lease\n" +
		"http_access deny all\n"
}

// SquidAccessRules are the acl and http_access lines of a squid.conf (what
// SquidAuthConfig wrote there), in order: a stand-in node that renders
// its own squid.conf takes the operator's access rules from the pod's.
func SquidAccessRules(squidConf string) string {
	var out []string
	for _, l := range strings.Split(squidConf, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "acl ") || strings.HasPrefix(l, "http_access ") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, "\n") + "\n"
}
