package proxyauth

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    PortRange
		wantErr bool
	}{
		{in: "443", want: PortRange{443, 443}},
		{in: " 8000-8999 ", want: PortRange{8000, 8999}},
		{in: "1-65535", want: PortRange{1, 65535}},
		{in: "0", wantErr: true},
		{in: "9000-8000", wantErr: true},
		{in: "65536", wantErr: true},
		{in: "http", wantErr: true},
		{in: "", wantErr: true},
	} {
		got, err := ParsePortRange(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseEgressNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		allowed, denied, ports []string
		want                   string
	}{
		{allowed: []string{"10.0.0.0/33"}, want: "--proxy-allowed-cidrs"},
		{denied: []string{"nope"}, want: "--proxy-denied-cidrs"},
		{ports: []string{"80-70"}, want: "--proxy-allowed-ports"},
	} {
		if _, err := ParseEgress(tc.allowed, tc.denied, tc.ports); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseEgress(%v, %v, %v) = %v, want an error naming %s", tc.allowed, tc.denied, tc.ports, err, tc.want)
		}
	}
	e, err := ParseEgress([]string{"10.1.2.3/16"}, []string{"203.0.113.0/24"}, []string{"8080"})
	if err != nil {
		t.Fatal(err)
	}
	want := Egress{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
		DeniedCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}, AllowedPorts: []PortRange{{8080, 8080}}}
	if diff := cmp.Diff(want, e, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("egress (-want +got):\n%s", diff)
	}
}

// TestSquidRules: the order is what decides (Squid takes the first
// http_access line that matches): the cache manager and the ports before
// the destinations, an allowed range as an exception to the refused ones.
func TestSquidRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    Egress
		want []string
	}{
		{"defaults", Egress{}, []string{
			"acl proxy_operator_connect method CONNECT",
			"acl proxy_operator_connect_ports port 443",
			"acl proxy_operator_http_ports port 80 443",
			"acl proxy_operator_blocked_dst dst 0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 127.0.0.0/8 169.254.0.0/16 172.16.0.0/12 192.0.0.0/24 192.168.0.0/16 198.18.0.0/15 224.0.0.0/4 240.0.0.0/4 ::/128 ::1/128 64:ff9b:1::/48 fc00::/7 fe80::/10 ff00::/8",
			"http_access deny manager",
			"http_access deny proxy_operator_connect !proxy_operator_connect_ports",
			"http_access deny !proxy_operator_connect !proxy_operator_http_ports",
			"http_access deny proxy_operator_blocked_dst",
		}},
		{"widened", Egress{
			AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
			DeniedCIDRs:  []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
			AllowedPorts: []PortRange{{8080, 8080}, {9000, 9100}},
		}, []string{
			"acl proxy_operator_connect method CONNECT",
			"acl proxy_operator_connect_ports port 443 8080 9000-9100",
			"acl proxy_operator_http_ports port 80 443 8080 9000-9100",
			"acl proxy_operator_blocked_dst dst 0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 127.0.0.0/8 169.254.0.0/16 172.16.0.0/12 192.0.0.0/24 192.168.0.0/16 198.18.0.0/15 224.0.0.0/4 240.0.0.0/4 ::/128 ::1/128 64:ff9b:1::/48 fc00::/7 fe80::/10 ff00::/8 203.0.113.0/24",
			"acl proxy_operator_allowed_dst dst 10.20.0.0/16",
			"http_access deny manager",
			"http_access deny proxy_operator_connect !proxy_operator_connect_ports",
			"http_access deny !proxy_operator_connect !proxy_operator_http_ports",
			"http_access deny proxy_operator_blocked_dst !proxy_operator_allowed_dst",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Split(strings.TrimSuffix(tc.e.SquidRules(), "\n"), "\n")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSquidAuthConfigOrder: no lease, no access; the egress rules come
// before the lease is allowed, and nothing is allowed after.
func TestSquidAuthConfigOrder(t *testing.T) {
	conf := SquidAuthConfig("/helper", "/config.json", DefaultRelayAddr, Egress{})
	var access []string
	for _, l := range strings.Split(conf, "\n") {
		if strings.HasPrefix(l, "http_access ") {
			access = append(access, l)
		}
	}
	want := []string{
		"http_access deny !proxy_operator_lease",
		"http_access deny manager",
		"http_access deny proxy_operator_connect !proxy_operator_connect_ports",
		"http_access deny !proxy_operator_connect !proxy_operator_http_ports",
		"http_access deny proxy_operator_blocked_dst",
		"http_access allow proxy_operator_lease",
		"http_access deny all",
	}
	if diff := cmp.Diff(want, access); diff != "" {
		t.Errorf("http_access lines (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(strings.Count(conf, "\nacl ")+strings.Count(conf, "\nhttp_access "),
		strings.Count(SquidAccessRules(conf), "\n")); diff != "" {
		t.Errorf("SquidAccessRules kept another number of acl and http_access lines (-want +got):\n%s", diff)
	}
}
