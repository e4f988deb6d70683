package config

import (
	"net/url"
	"strings"
)

// Web is the web room, served by the bridge's HTTP server at /.
type Web struct {
	// Enabled serves the web room (the no-config run turns it on).
	Enabled bool `yaml:"enabled"`
	// PublicURL is where people reach the web room (https://bridge.example.com):
	// sign-in links and the "Open" links of chat cards are made from it, and
	// an https URL makes the session cookie Secure. Empty: links use the
	// address the API listens on, and chat cards carry no link.
	PublicURL string `yaml:"public_url"`
}

// validateWeb checks the web section (web.public_url: an absolute http or
// https URL without query or fragment).
func (c *Config) validateWeb() error {
	if c.Web.PublicURL == "" {
		return nil
	}
	u, err := url.Parse(c.Web.PublicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return keyErr("web.public_url", "%q is not an absolute http(s) URL (want e.g. https://bridge.example.com)", c.Web.PublicURL)
	}
	c.Web.PublicURL = strings.TrimSuffix(c.Web.PublicURL, "/")
	return nil
}
