// Package slacktest is an in-process fake of Slack's Web API and Socket Mode that the real slack-go client talks to in tests.
package slacktest
