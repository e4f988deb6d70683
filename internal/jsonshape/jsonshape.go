// Package jsonshape compares the shapes of JSON documents: their field
// names and the JSON types of the values, not the values. The fakes' tests
// use it to hold the fakes' answers to the answers the platforms recorded.
package jsonshape

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Diff lists where got differs in shape from want: a field of got that want
// lacks, a field whose JSON type differs, and (unless subset) a field of
// want that got lacks. Objects are compared field by field, arrays by their
// first elements. An error means a document is not JSON.
func Diff(got, want []byte, subset bool) ([]string, error) {
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		return nil, fmt.Errorf("jsonshape: got: %w", err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return nil, fmt.Errorf("jsonshape: want: %w", err)
	}
	var out []string
	diff("$", g, w, subset, &out)
	return out, nil
}

// Kind is the JSON type of a decoded value.
func Kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	default:
		return "object"
	}
}

func diff(path string, g, w any, subset bool, out *[]string) {
	if Kind(g) != Kind(w) {
		*out = append(*out, fmt.Sprintf("%s: %s, recorded %s", path, Kind(g), Kind(w)))
		return
	}
	switch gv := g.(type) {
	case map[string]any:
		wv := w.(map[string]any)
		for _, k := range sortedKeys(gv) {
			if _, ok := wv[k]; !ok {
				*out = append(*out, fmt.Sprintf("%s.%s: not in the recorded answer", path, k))
				continue
			}
			diff(path+"."+k, gv[k], wv[k], subset, out)
		}
		if !subset {
			for _, k := range sortedKeys(wv) {
				if _, ok := gv[k]; !ok {
					*out = append(*out, fmt.Sprintf("%s.%s: missing (recorded %s)", path, k, Kind(wv[k])))
				}
			}
		}
	case []any:
		wv := w.([]any)
		if len(gv) > 0 && len(wv) > 0 {
			diff(path+"[0]", gv[0], wv[0], subset, out)
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
