package config_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/roombridge/roombridge/config"
)

// FuzzParse: the config loader never panics; a file it takes is valid and
// reads back the same from its own YAML; a file it refuses gets an error
// that names the key it is about (*config.Error), unless the file is not
// YAML at all, is empty or is not a mapping. Seeds: testdata/fuzz/FuzzParse/, from the README's
// and deploy/'s configurations and hand-written refusals.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := config.Parse(b)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a config and the error %v", err)
			}
			checkError(t, b, err)
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("a parsed config does not validate: %v", err)
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("marshal %+v: %v", c, err)
		}
		if strings.Contains(string(out), "${") {
			return // a value an environment variable made; it would be expanded again
		}
		again, err := config.Parse(out)
		if err != nil {
			t.Fatalf("a parsed config does not parse again: %v\n%s", err, out)
		}
		// Compared as YAML: an empty list may come back as nil.
		if out2, err := yaml.Marshal(again); err != nil || !bytes.Equal(out2, out) {
			t.Fatalf("a parsed config reads back differently (%v):\n%s\n%s", err, out, out2)
		}
	})
}

// checkError: an error names a key, or the file is not YAML, is empty, or is
// not a mapping of keys at all.
func checkError(t *testing.T, b []byte, err error) {
	t.Helper()
	var ke *config.Error
	if errors.As(err, &ke) {
		if ke.Key == "" || !strings.HasPrefix(err.Error(), "config: "+ke.Key+": ") {
			t.Fatalf("error %q names no key (key %q)", err, ke.Key)
		}
		return
	}
	var node yaml.Node
	if yaml.Unmarshal(b, &node) != nil || len(node.Content) == 0 || node.Content[0].Kind != yaml.MappingNode {
		return // not YAML, empty, or not a mapping
	}
	t.Fatalf("error %q names no key", err)
}
