package main

import (
	"io"
	"log/slog"
)

// closeLogged closes c as a command returns and logs a failure. The
// command's outcome is decided by then, but a failed close (a log's last
// fsync, a server that did not drain in time, a journal that did not reach
// the disk) must still be seen.
func closeLogged(log *slog.Logger, what string, c io.Closer) {
	if err := c.Close(); err != nil {
		log.Error("closing "+what, "err", err)
	}
}
