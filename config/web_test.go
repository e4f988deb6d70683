package config

import (
	"strings"
	"testing"
)

// web: off unless enabled in a file, on in the no-config run; public_url
// must be an absolute http(s) URL (its trailing slash dropped), and an
// error names the key.
func TestWeb(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.Web.Enabled {
		t.Error("web enabled without a web section")
	}
	if !Default("bridge").Web.Enabled {
		t.Error("the no-config run has no web room")
	}
	c, err = Parse([]byte(minimal + "web: {enabled: true, public_url: 'https://bridge.example.com/'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Web.Enabled || c.Web.PublicURL != "https://bridge.example.com" {
		t.Errorf("web %+v", c.Web)
	}
	for _, bad := range []string{"bridge.example.com", "ftp://x", "https://x/?a=1", "https://"} {
		_, err := Parse([]byte(minimal + "web: {enabled: true, public_url: '" + bad + "'}\n"))
		if err == nil || !strings.Contains(err.Error(), "web.public_url") {
			t.Errorf("public_url %q: %v, want an error naming web.public_url", bad, err)
		}
	}
	if _, err := Parse([]byte(minimal + "web: {enable: true}\n")); err == nil || !strings.Contains(err.Error(), "web.enable") {
		t.Errorf("unknown key: %v, want an error naming web.enable", err)
	}
}
