package main

import (
	"fmt"
	"net"

	"github.com/roombridge/roombridge/config"
)

// preflight is what `run` checks before it makes anything and what `config
// check` reports: cfg's files, data_dir and agent commands
// (config.Preflight: err), and whether the API's port can be listened on
// (portErr, naming http.addr). run refuses to start on either and serves on
// ln; config check refuses err, warns of portErr and closes ln. ln is nil
// unless both are nil.
func preflight(cfg *config.Config) (ln net.Listener, portErr, err error) {
	err = cfg.Preflight()
	ln, portErr = net.Listen("tcp", cfg.HTTP.Addr)
	if portErr != nil {
		return nil, fmt.Errorf("http.addr: %w", portErr), err
	}
	if err != nil {
		_ = ln.Close()
		return nil, nil, err
	}
	return ln, nil, nil
}
