package threads

import "github.com/roombridge/roombridge/chat"

// SendsThrough is the connector d sends the effects of surface through
// (after unwrapping its fences), for the tests of Fenced.
func SendsThrough(d *Deliverer, surface string) chat.Connector { return d.connectors[surface].conn }

// Encode is e's payload as the outbox keeps it.
func Encode(e *Effect) ([]byte, error) { return e.encode() }
