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
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/roombridge/roombridge/internal/clip"
)

// file is what decode learnt of a configuration file besides its values.
type file struct {
	secretEnv []string       // the variables expanded into secret keys
	lines     map[string]int // the line of each key and list item, by its path
}

// at gives err, if it is an *Error about a key of the file without a line
// (Validate's), the line of that key.
func (f file) at(err error) error {
	var ke *Error
	if errors.As(err, &ke) && ke.Line == 0 {
		ke.Line = f.lines[ke.Key]
	}
	return err
}

// keyErrAt is keyErr about the key on line of the file.
func keyErrAt(key string, line int, format string, args ...any) error {
	return &Error{Key: key, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// decode reads a configuration file's YAML into a T: ${ENV} expanded (the
// variables expanded into secret keys are returned), every key checked
// against T's fields, so an unknown or misplaced key is named with its line.
func decode[T any](b []byte) (*T, file, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, file{}, fmt.Errorf("config: %w", err)
	}
	if len(root.Content) == 0 {
		return nil, file{}, errors.New("config: the file is empty")
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return nil, file{}, fmt.Errorf("config: line %d: the file is not a mapping of keys (want lines like \"owner: acme\")", doc.Line)
	}
	f := file{lines: map[string]int{}}
	if err := expandEnv(doc, "", doc.Line, &f.secretEnv); err != nil {
		return nil, file{}, err
	}
	if err := (&keyChecker{lines: f.lines}).check(doc, reflect.TypeFor[T](), "", doc.Line); err != nil {
		return nil, file{}, err
	}
	// Decoded from the checked tree itself: a text marshalled from it
	// would have other line numbers, and need not read back the same (an
	// empty value in a flow mapping came back as "").
	var v T
	if err := doc.Decode(&v); err != nil {
		return nil, file{}, fmt.Errorf("config: %w", err)
	}
	return &v, f, nil
}

// secretKeys are the last parts of the keys that hold secrets.
var secretKeys = map[string]bool{
	"bot_token": true, "app_token": true, "signing_secret": true, "app_secret": true,
	"verification_token": true, "encrypt_key": true, "api_token": true,
}

var envRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces ${VAR} in every scalar value; an unset variable is an
// error naming the key that uses it (on line). The names of the variables
// expanded into a secret key are appended to secretEnv.
func expandEnv(n *yaml.Node, path string, line int, secretEnv *[]string) error {
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
			return keyErrAt(path, line, "environment variable %s is not set", missing)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := expandEnv(n.Content[i+1], join(path, n.Content[i].Value), n.Content[i].Line, secretEnv); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := expandEnv(c, fmt.Sprintf("%s[%d]", path, i), c.Line, secretEnv); err != nil {
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

// keyChecker walks the YAML tree against the Go type and reports the first
// key that the type does not have, that is set twice, or whose value does
// not decode into its type, by its full path and the line of the key. It
// notes the line of each key and list item in lines, and checks each
// anchored value once per type, so that aliases of aliases cannot make the
// walk exponential.
type keyChecker struct {
	lines   map[string]int
	aliases map[aliasCheck]bool
}

type aliasCheck struct {
	n *yaml.Node
	t reflect.Type
}

// check checks n, the value of the key path on line, against t.
func (kc *keyChecker) check(n *yaml.Node, t reflect.Type, path string, line int) error {
	if n.Kind == yaml.AliasNode {
		k := aliasCheck{n.Alias, t}
		if n.Alias == nil || kc.aliases[k] {
			return nil
		}
		if kc.aliases == nil {
			kc.aliases = map[aliasCheck]bool{}
		}
		kc.aliases[k] = true
		return kc.check(n.Alias, t, path, line)
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
			p := fmt.Sprintf("%s[%d]", path, i)
			kc.lines[p] = c.Line
			if err := kc.check(c, t.Elem(), p, c.Line); err != nil {
				return err
			}
		}
		return nil
	}
	// A scalar, or a value of the wrong kind: it must decode into t.
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return keyErrAt(path, line, "%s is not %s", describe(n), wanted(t))
		}
		return keyErrAt(path, line, "%v", err)
	}
	return nil
}

// describe names a YAML value in an error: a scalar quoted (cut to 40
// bytes), else its kind.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(clip.Line(n.Value, 40, clip.Bytes))
}

// wanted says, in the config's words, what a key of type t holds.
func wanted(t reflect.Type) string {
	if t == reflect.TypeFor[time.Duration]() {
		return "a duration (like 30s, 5m or 1h)"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number (0 or more)"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a text value"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping of keys"
	}
	return "a " + t.String()
}

// mapping checks the keys of a mapping (field gives a key's type, or false
// for an unknown key) and their values.
func (kc *keyChecker) mapping(n *yaml.Node, path string, field func(string) (reflect.Type, bool)) error {
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn := n.Content[i]
		k := kn.Value
		if kn.Kind != yaml.ScalarNode || k == "" {
			return keyErrAt(join(path, strconv.Quote(k)), kn.Line, "a key must be a non-empty string")
		}
		ft, ok := field(k)
		if !ok {
			return keyErrAt(join(path, k), kn.Line, "unknown key")
		}
		if first, dup := lines[k]; dup {
			return keyErrAt(join(path, k), kn.Line, "set twice (first at line %d)", first)
		}
		lines[k] = kn.Line
		kc.lines[join(path, k)] = kn.Line
		if err := kc.check(n.Content[i+1], ft, join(path, k), kn.Line); err != nil {
			return err
		}
	}
	return nil
}
