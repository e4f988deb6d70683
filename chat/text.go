package chat

import "strings"

// LinkText writes a link in an inbound message's text as people read it,
// the same on every surface: "label (URL)", or the URL alone when the label
// is empty or only repeats it ("x.test" for https://x.test, an address for
// its mailto: link, which is written without the scheme).
func LinkText(label, url string) string {
	if label == "" || label == url || strings.HasSuffix(url, ":"+label) || strings.HasSuffix(url, "//"+label) {
		return strings.TrimPrefix(url, "mailto:")
	}
	if url == "" {
		return label
	}
	return label + " (" + url + ")"
}
