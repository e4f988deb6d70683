// Package feishutest fakes the Feishu Open API and its long connection so that tests can drive the real Lark SDK against it.
package feishutest
