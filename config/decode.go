package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decode reads a configuration file's YAML into a T: ${ENV} expanded (the
// variables expanded into secret keys are returned), every key checked
// against T's fields, so an unknown or misplaced key is named.
func decode[T any](b []byte) (*T, []string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	if len(root.Content) == 0 {
		return nil, nil, errors.New("config: the file is empty")
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("config: line %d: the file is not a mapping of keys (want lines like \"owner: acme\")", doc.Line)
	}
	var secretEnv []string
	if err := expandEnv(doc, "", &secretEnv); err != nil {
		return nil, nil, err
	}
	if err := checkKeys(doc, reflect.TypeFor[T](), ""); err != nil {
		return nil, nil, err
	}
	// Decoded from the checked tree itself: a text marshalled from it
	// would have other line numbers, and need not read back the same (an
	// empty value in a flow mapping came back as "").
	var v T
	if err := doc.Decode(&v); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	return &v, secretEnv, nil
}

// secretKeys are the last parts of the keys that hold secrets.
var secretKeys = map[string]bool{
	"bot_token": true, "app_token": true, "signing_secret": true, "app_secret": true,
	"verification_token": true, "encrypt_key": true, "api_token": true,
}

var envRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces ${VAR} in every scalar value; an unset variable is an
// error naming the key that uses it. The names of the variables expanded
// into a secret key are appended to secretEnv.
func expandEnv(n *yaml.Node, path string, secretEnv *[]string) error {
	switch n.Kind {
	case yaml.ScalarNode:
		var missing string
		n.Value = envRE.ReplaceAllStringFunc(n.Value, func(m string) string {
			name := m[2 : len(m)-1]
			if secretKeys[lastPart(path)] && !slices.Contains(*secretEnv, name) {
				*secretEnv = append(*secretEnv, name)
			}
			v, ok := os.LookupEnv(name)
			if !ok && missing == "" {
				missing = name
			}
			return v
		})
		if missing != "" {
			return keyErr(path, "environment variable %s is not set", missing)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := expandEnv(n.Content[i+1], join(path, n.Content[i].Value), secretEnv); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := expandEnv(c, fmt.Sprintf("%s[%d]", path, i), secretEnv); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// checkKeys walks the YAML tree against the Go type and reports the first key
// that the type does not have, that is set twice, or whose value does not
// decode into its type, by its full path (with the line of the file).
func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	return (&keyChecker{}).check(n, t, path)
}

// keyChecker checks each anchored value once per type, so that aliases of
// aliases cannot make the walk exponential.
type keyChecker struct {
	aliases map[aliasCheck]bool
}

type aliasCheck struct {
	n *yaml.Node
	t reflect.Type
}

func (kc *keyChecker) check(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.AliasNode {
		k := aliasCheck{n.Alias, t}
		if n.Alias == nil || kc.aliases[k] {
			return nil
		}
		if kc.aliases == nil {
			kc.aliases = map[aliasCheck]bool{}
		}
		kc.aliases[k] = true
		return kc.check(n.Alias, t, path)
	}
	if n.ShortTag() == "!!null" {
		return nil // a key left empty: the zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				fields[name] = f.Type
			}
		}
		return kc.mapping(n, path, func(k string) (reflect.Type, bool) {
			ft, ok := fields[k]
			return ft, ok
		})
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		return kc.mapping(n, path, func(string) (reflect.Type, bool) { return t.Elem(), true })
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, c := range n.Content {
			if err := kc.check(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	// A scalar, or a value of the wrong kind: it must decode into t.
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			return keyErr(path, "%s", te.Errors[0])
		}
		return keyErr(path, "line %d: %v", n.Line, err)
	}
	return nil
}

// mapping checks the keys of a mapping (field gives a key's type, or false
// for an unknown key) and their values.
func (kc *keyChecker) mapping(n *yaml.Node, path string, field func(string) (reflect.Type, bool)) error {
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn := n.Content[i]
		k := kn.Value
		if kn.Kind != yaml.ScalarNode || k == "" {
			return keyErr(join(path, strconv.Quote(k)), "line %d: a key must be a non-empty string", kn.Line)
		}
		ft, ok := field(k)
		if !ok {
			return keyErr(join(path, k), "unknown key (line %d)", kn.Line)
		}
		if first, dup := lines[k]; dup {
			return keyErr(join(path, k), "set twice (lines %d and %d)", first, kn.Line)
		}
		lines[k] = kn.Line
		if err := kc.check(n.Content[i+1], ft, join(path, k)); err != nil {
			return err
		}
	}
	return nil
}
