// Package requests is the request domain: IDs, the seven states, the pure
// transition function, and the Service that applies transitions through the
// store with an audit record in the same transaction as each change.
package requests
