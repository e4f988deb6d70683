package main

import (
	"log/slog"
	"os"
	"slices"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/connectors/console"
	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/slack"
)

// connectorsFor builds the connectors the config asks for, explicitly (no
// init-time registry).
func connectorsFor(cfg *config.Config, log *slog.Logger) ([]chat.Connector, error) {
	var conns []chat.Connector
	// The console serves the first room bound to it.
	if i := slices.IndexFunc(cfg.Rooms, func(r config.Room) bool { return r.Bound()[chat.Console] != "" }); i >= 0 {
		user := "you"
		if cfg.Console != nil {
			user = cfg.Console.User
		}
		conns = append(conns, console.New(os.Stdin, os.Stdout, cfg.Rooms[i].Bound()[chat.Console], user))
	}
	if s := cfg.Slack; s != nil {
		c, err := slackConnector(s, log)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	if f := cfg.Feishu; f != nil {
		c, err := feishuConnector(f, log)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	log.Debug("connectors built", "count", len(conns))
	return conns, nil
}

// slackConnector builds the Slack connector from the slack section.
func slackConnector(s *config.Slack, log *slog.Logger) (*slack.Connector, error) {
	bot, err := config.Secret("slack.bot_token", s.BotToken, s.BotTokenFile)
	if err != nil {
		return nil, err
	}
	app, err := config.Secret("slack.app_token", s.AppToken, s.AppTokenFile)
	if err != nil {
		return nil, err
	}
	secret, err := config.Secret("slack.signing_secret", s.SigningSecret, s.SigningSecretFile)
	if err != nil {
		return nil, err
	}
	return slack.New(slack.Options{Mode: s.Mode, BotToken: bot, AppToken: app, SigningSecret: secret,
		APIURL: s.APIURL, BroadcastFinal: s.BroadcastFinal, Log: log})
}

// feishuConnector builds the Feishu connector from the feishu section.
func feishuConnector(f *config.Feishu, log *slog.Logger) (*feishu.Connector, error) {
	secret, err := config.Secret("feishu.app_secret", f.AppSecret, f.AppSecretFile)
	if err != nil {
		return nil, err
	}
	token, err := config.Secret("feishu.verification_token", f.VerificationToken, f.VerificationTokenFile)
	if err != nil {
		return nil, err
	}
	key, err := config.Secret("feishu.encrypt_key", f.EncryptKey, f.EncryptKeyFile)
	if err != nil {
		return nil, err
	}
	return feishu.New(feishu.Options{Mode: f.Mode, AppID: f.AppID, AppSecret: secret, VerificationToken: token,
		EncryptKey: key, BaseURL: f.BaseURL, Log: log})
}
