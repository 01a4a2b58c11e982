package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseUsername(t *testing.T) {
	for _, tc := range []struct {
		name, username string
		want           UsernameOptions
		wantErr        string
	}{
		{name: "empty rotates", username: ""},
		{name: "no options rotates", username: "scrapy"},
		{name: "dots without options rotate", username: "my.crawler"},
		{name: "a sticky session", username: "session-abc", want: UsernameOptions{Session: "abc"}},
		{name: "a session key may hold dashes", username: "session-abc-1", want: UsernameOptions{Session: "abc-1"}},
		{name: "everything", username: "ns-crawlers.region-eu.tier-premium.session-s1.priority-2.wait-30",
			want: UsernameOptions{Namespace: "crawlers", Session: "s1", Selector: map[string]string{"region": "eu", "tier": "premium"}, Priority: 2, Wait: 30 * time.Second}},
		{name: "a part without a value", username: "ns-crawlers.session", wantErr: `"session": want key-value`},
		{name: "an empty key", username: "-x", wantErr: `"-x": want key-value`},
		{name: "twice", username: "ns-a.ns-b", wantErr: "ns given twice"},
		{name: "a priority that is no number", username: "priority-high", wantErr: "priority must be an integer"},
		{name: "a negative wait", username: "wait--1", wantErr: "whole seconds"},
		{name: "too long", username: "session-" + strings.Repeat("a", 600), wantErr: "over 512"},
		{name: "a session key too long", username: "session-" + strings.Repeat("a", 200), wantErr: "over 128"},
		{name: "too many options", username: strings.Repeat("a-b.", 20) + "c-d", wantErr: "over 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseUsername(tc.username)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseUsername(%q) = %+v, %v; want an error containing %q", tc.username, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseUsername(%q): %v", tc.username, err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("ParseUsername(%q) (-want +got):\n%s", tc.username, d)
			}
		})
	}
}
