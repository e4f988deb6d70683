package main

import (
	"log/slog"
	"net/http"
	"os"
	"slices"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/connectors/console"
)

// webhooks is a connector that receives platform callbacks over the API's
// HTTP server (Slack Events API, Feishu HTTP callback). Routes maps mux
// patterns ("POST /slack/events") to handlers that hand events to h.
type webhooks interface {
	Routes(h chat.Handler) map[string]http.Handler
}

// connectorsFor builds the connectors the config asks for, explicitly (no
// init-time registry).
func connectorsFor(cfg *config.Config, log *slog.Logger) ([]chat.Connector, error) {
	var conns []chat.Connector
	if i := slices.IndexFunc(cfg.Rooms, func(r config.Room) bool { return r.Console }); i >= 0 {
		user := "you"
		if cfg.Console != nil {
			user = cfg.Console.User
		}
		conns = append(conns, console.New(os.Stdin, os.Stdout, cfg.Rooms[i].Name, user))
	}
	log.Debug("connectors built", "count", len(conns))
	return conns, nil
}
