package etcd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"google.golang.org/grpc/grpclog"
)

var grpcLogOnce sync.Once

// RouteGRPCLogs sends gRPC's own log lines (connection errors, GOAWAYs)
// to log, in the bridge's format, with key "component"="grpc": warnings and
// errors at their level, gRPC's info lines at debug. gRPC's logger is
// process-wide and may be set only before gRPC is used, so only the first
// call counts.
func RouteGRPCLogs(log *slog.Logger) {
	grpcLogOnce.Do(func() { grpclog.SetLoggerV2(grpcLogger{log.With("component", "grpc")}) })
}

// grpcLogger is a grpclog.LoggerV2 over slog.
type grpcLogger struct{ log *slog.Logger }

func (g grpcLogger) out(level slog.Level, msg string) {
	g.log.Log(context.Background(), level, msg)
}

func (g grpcLogger) Info(args ...any)   { g.out(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any) { g.out(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Infof(format string, args ...any) {
	g.out(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Warning(args ...any)   { g.out(slog.LevelWarn, fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any) { g.out(slog.LevelWarn, fmt.Sprint(args...)) }
func (g grpcLogger) Warningf(format string, args ...any) {
	g.out(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Error(args ...any)   { g.out(slog.LevelError, fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any) { g.out(slog.LevelError, fmt.Sprint(args...)) }
func (g grpcLogger) Errorf(format string, args ...any) {
	g.out(slog.LevelError, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Fatal(args ...any)                 { g.fatal(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalln(args ...any)               { g.fatal(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalf(format string, args ...any) { g.fatal(fmt.Sprintf(format, args...)) }

// V reports whether verbosity level l is logged: only level 0.
func (g grpcLogger) V(l int) bool { return l <= 0 }

func (g grpcLogger) fatal(msg string) {
	g.out(slog.LevelError, msg)
	os.Exit(1)
}
