// Package archtest holds the test of the module's import graph (no code):
// the connectors sit at the bottom beside the store (they import chat,
// clock, connectors/ratelimit and internal/..., no core package), and the
// core imports no connector, no platform SDK, no command and no test fake.
// Packages are classified by path, so a new package is checked without
// editing the test.
package archtest
