package requests

import (
	"fmt"
	"strings"
	"time"
)

// Usage is what an agent's turns cost: tokens and dollars, as the model
// reported them (Claude Code's result event, codex's turn.completed; exec
// agents may report a usage event). A request sums its turns'.
type Usage struct {
	// Turns counts the turns that reported usage.
	Turns        int   `json:"turns,omitempty"`
	InputTokens  int64 `json:"input_tokens,omitempty"`
	OutputTokens int64 `json:"output_tokens,omitempty"`
	// CacheReadTokens and CacheWriteTokens are input tokens read from, or
	// written to, the model's prompt cache.
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	// CostUSD is the cost in dollars (0: not reported).
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// IsZero reports whether u reports nothing.
func (u Usage) IsZero() bool { return u == Usage{} }

// Add returns u plus v.
func (u Usage) Add(v Usage) Usage {
	return Usage{Turns: u.Turns + v.Turns, InputTokens: u.InputTokens + v.InputTokens,
		OutputTokens: u.OutputTokens + v.OutputTokens, CacheReadTokens: u.CacheReadTokens + v.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens, CostUSD: u.CostUSD + v.CostUSD}
}

// Tokens is every token counted: input (cached or not) and output.
func (u Usage) Tokens() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// Line is the usage of a request that took took as a status line shows it:
// "3 turns · 41 s · 18.2k tokens · $0.21" (the parts it has; took 0: not
// shown).
func (u Usage) Line(took time.Duration) string {
	var parts []string
	if u.Turns > 1 {
		parts = append(parts, fmt.Sprintf("%d turns", u.Turns))
	}
	if took > 0 {
		parts = append(parts, fmt.Sprintf("%d s", int64(took.Round(time.Second)/time.Second)))
	}
	if n := u.Tokens(); n > 0 {
		parts = append(parts, tokens(n)+" tokens")
	}
	if u.CostUSD > 0 {
		parts = append(parts, fmt.Sprintf("$%.2f", u.CostUSD))
	}
	return strings.Join(parts, " · ")
}

// tokens writes a count short: 950, 18.2k, 1.3M.
func tokens(n int64) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
